"""Per-step metrics to JSONL and TensorBoard, and a rich progress bar."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List


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
