"""Per-step metrics to JSONL, TensorBoard and W&B, and a rich progress bar.

Every number of a step's metrics becomes a scalar of the same name in TensorBoard and W&B, with no per-key code
(a new metric shows up by being returned). Besides them (``log_details``): histograms of reward, advantage and
response length, a table of sample completions and a contact sheet of a step's views (``mmrl.train.step_details``);
at the start, the config as text and as TensorBoard hparams. ``system_metrics`` adds wall-clock and memory.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, List

HPARAM_METRICS = ("reward/total", "eval/accuracy")  # the scalars TensorBoard's hparams table shows beside the config


class MetricsLogger:
    """Metrics to ``metrics.jsonl`` and TensorBoard, and to Weights & Biases when ``wandb_project`` is set (the run
    id of ``run.json`` is the W&B run id, so a resumed run continues the same W&B run)."""

    def __init__(self, out_dir: str, resume_step: int = 0, tensorboard: bool = True, wandb_project: str | None = None,
                 config: Dict[str, Any] | None = None):
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():  # on resume drop rows written after the checkpoint
            rows = [r for r in self.read(self.path) if r.get("step", 0) <= resume_step] if resume_step else []
            self.path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        kept = self.read(self.path) if self.path.exists() else []
        # wall-clock seconds the run had trained before this process (time/elapsed of the last row kept)
        self.elapsed_before = float(next((r["time/elapsed"] for r in reversed(kept) if "time/elapsed" in r), 0.0))
        # the steps this run was resumed at (report markers): earlier ones up to this step, then this one
        resumes = [s for s in read_resumes(self.path.parent) if s < resume_step] + ([resume_step] if resume_step else [])
        marks = self.path.parent / RESUMES
        if resumes:
            marks.write_text("".join(json.dumps({"resumed_at": s}) + "\n" for s in resumes))
        elif marks.exists():
            marks.unlink()
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                # drop the events an earlier process logged past the resume step (past 0 on a fresh start): else
                # TensorBoard shows the steps between the last checkpoint and a kill twice
                self.tb = SummaryWriter(str(Path(out_dir) / "tb"), purge_step=resume_step + 1)
            except ImportError:
                self.tb = None
        if self.tb is not None and config is not None:
            self._tb_config(config)
        self.wb = None
        if wandb_project:
            import wandb

            from mmrl.train.run_dir import read_run

            run_id = (read_run(out_dir) or {}).get("run_id")
            self.wb = wandb.init(project=wandb_project, name=Path(out_dir).name, id=run_id, resume="allow",
                                 dir=str(out_dir), config=config)

    def log(self, step: int, metrics: Dict[str, Any]) -> None:
        row = {"step": step, **{k: v for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)
        if self.wb is not None:
            self.wb.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)

    def _tb_config(self, config: Dict[str, Any]) -> None:
        """The config as a YAML text panel and as TensorBoard hparams (one flat ``section.key`` per value)."""
        import yaml
        from torch.utils.tensorboard.summary import hparams

        self.tb.add_text("config", "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)
        flat = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in flatten(config).items()}
        for summary in hparams(flat, {k: 0.0 for k in HPARAM_METRICS}):
            self.tb.file_writer.add_summary(summary)

    def log_details(self, step: int, details: Dict[str, Any]) -> None:
        """Histograms, the completions table and the contact sheet of ``mmrl.train.step_details.step_details``."""
        from mmrl.train.step_details import completions_markdown

        hists, rows, sheet = details.get("histograms", {}), details.get("completions"), details.get("contact_sheet")
        if self.tb is not None:
            for name, values in hists.items():
                if len(values):
                    self.tb.add_histogram(f"hist/{name}", values, step)
            if rows is not None:
                self.tb.add_text("samples/completions", completions_markdown(rows), step)
            if sheet is not None:
                import numpy as np

                self.tb.add_image("samples/views", np.asarray(sheet), step, dataformats="HWC")
        if self.wb is not None:
            import wandb

            out: Dict[str, Any] = {f"hist/{k}": wandb.Histogram(v.tolist()) for k, v in hists.items() if len(v)}
            if rows:
                out["samples/completions"] = wandb.Table(columns=list(rows[0]), data=[list(r.values()) for r in rows])
            if sheet is not None:
                out["samples/views"] = wandb.Image(sheet)
            if out:
                self.wb.log(out, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wb is not None:
            self.wb.finish()

    @staticmethod
    def read(path) -> List[Dict[str, Any]]:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


RESUMES = "resumes.jsonl"


def read_resumes(run_dir) -> List[int]:
    """The steps a run was resumed at, from ``<run_dir>/resumes.jsonl`` (none when the file is absent)."""
    path = Path(run_dir) / RESUMES
    if not path.exists():
        return []
    return [int(json.loads(x)["resumed_at"]) for x in path.read_text().splitlines() if x.strip()]


def flatten(d: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``{"train": {"lr": 1e-5}}`` -> ``{"train.lr": 1e-5}`` (lists and None stay values)."""
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def system_metrics(start: float) -> Dict[str, float]:
    """``time/elapsed``: wall-clock seconds since ``start`` (a ``time.time()``, moved back by the seconds trained
    before a resume); ``mem/rss_peak_gb``: this process's peak resident memory (``getrusage``; KiB on Linux, bytes
    on macOS); ``mem/cuda_max_allocated_gb``: the most CUDA memory torch has held (with CUDA only)."""
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    out = {"time/elapsed": time.time() - start, "mem/rss_peak_gb": rss / 2**30}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["mem/cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def progress(total: int, description: str, disable: bool = False):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), TextColumn("{task.fields[info]}"), disable=disable)


def entropy_sums(trajs) -> List[float]:
    """``[sum of -log pi(y_t), token count]`` over the sampled, trained response tokens; their ratio estimates the
    per-token entropy of the sampling policy: H(pi) = E_{y~pi}[-log pi(y)], so the mean of -log pi(y_t) over
    sampled tokens is an unbiased Monte Carlo estimate (no full-vocabulary logits needed). Sums, so that ranks
    can add theirs. A fall toward 0 is the usual sign of entropy collapse in RL post-training (DAPO, Yu et al.
    2025, sec. 3.1)."""
    num = sum(float(-(t.logprobs.float() * t.loss_mask).sum()) for t in trajs)
    return [num, float(sum(int(t.loss_mask.sum()) for t in trajs))]
