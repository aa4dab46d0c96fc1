"""The miniature protocol (``docs/miniatures.md``), enforced for every RL bench: seeds, test size, the RL setting
chosen on a validation split, the coin-flip control, the pre-flight and the results file.

- ``Protocol`` refuses fewer than ``MIN_SEEDS`` seeds (``MIN_SEEDS_SMALL`` for a small effect) and test sets under
  ``MIN_TEST`` items (binomial standard error ``100 sqrt(p (1 - p) / n)`` <= 2.5 points at p = 0.5) unless
  ``smoke`` is set; a smoke run's results file says so at the top.
- ``seed_plan``: a protocol seed is an independent world AND an independent SFT checkpoint AND an RL seed.
- ``select_setting``: the RL learning rate and KL coefficient from a small grid, by validation accuracy (ties to the
  smaller lr, then the larger KL), the same for every arm; ``setting_lines`` reports the grid; ``pooled_selection``
  waits for every seed process's grid and selects on their mean.
- ``add_seed_process_args`` / ``write_seed_record``: a bench run as one process per seed (``--only S``) writing
  ``<seed_dir>/seed<S>.json``, then one ``--render`` of the results file from those records; ``SeedState`` (what a
  seed process has finished, so a rerun resumes), ``Clock`` (a stage's wall and CPU minutes) and
  ``dropped_by_deadline`` (an optional arm starts only when predicted to end before ``--deadline``).
- ``seed_main`` / ``seed_process`` / ``seed_preflight`` / ``SeedArms``: the command line and the stages of such a
  seed process (``pacg_protocol``, ``dspo_protocol``): the pre-flight (reused, and the stop), the grid, the pooled
  selection, then the arms (the grid's chosen run adopted as the true-reward arm, each later arm trained, costed and
  evaluated, or dropped by the deadline).
- ``coin_flip_config``: the control arm, ``accuracy`` replaced by ``coin_flip`` (``stream`` by ``stream_coin_flip``;
  ``mmrl.rewards.coin_flip``).
- ``bench/_preflight.py``: the statistics printed before any RL is spent, and the stop when the method cannot act.
- ``Results``: the results file written by the bench in one run, its command at the top, every arm with mean
  [95% t-interval] and per-seed values, the SFT start and the coin-flip arm required, paired differences, the
  setting chosen from the seed records' grids.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from _arms import log
from bpo_table import ci95, fmt_ci

from mmrl.errors import ConfigError

MIN_SEEDS, MIN_SEEDS_SMALL = 3, 5
MIN_TEST = 400
MAX_SE_POINTS = 2.5
DEFAULT_LR_GRID = (1e-6, 3e-6, 1e-5, 3e-5)
DEFAULT_KL_GRID = (0.0, 0.01)
SFT_ARM, COIN_ARM = "sft", "coin_flip"


class ProtocolError(ConfigError):
    """A bench asked for less than the protocol requires (and did not say ``--smoke``)."""


def standard_error_points(n: int, p: float = 0.5) -> float:
    """Binomial standard error of an accuracy over ``n`` items, in points: 100 sqrt(p (1 - p) / n)."""
    return 100.0 * math.sqrt(p * (1 - p) / n) if n > 0 else float("inf")


@dataclass
class Protocol:
    command: str  # the bench's named command, printed at the top of its results file
    seeds: List[int]
    n_test: int
    n_val: int = 0
    small_effect: bool = False
    smoke: bool = False
    lr_grid: Sequence[float] = DEFAULT_LR_GRID
    kl_grid: Sequence[float] = DEFAULT_KL_GRID

    def check(self) -> "Protocol":
        """Raise ``ProtocolError`` naming the rule a full run breaks; a smoke run passes and is labelled."""
        if len(set(self.seeds)) != len(self.seeds):
            raise ProtocolError(f"protocol: repeated seeds {self.seeds}")
        if not self.lr_grid or not self.kl_grid:
            raise ProtocolError("protocol: the lr and KL grids need at least one value each")
        if self.smoke:
            return self
        need = MIN_SEEDS_SMALL if self.small_effect else MIN_SEEDS
        if len(self.seeds) < need:
            raise ProtocolError(f"protocol: {len(self.seeds)} seed(s) {self.seeds}; a miniature needs >= {need} "
                                f"independent seeds{' (small effect)' if self.small_effect else ''} (--smoke to try)")
        if self.n_test < MIN_TEST:
            raise ProtocolError(f"protocol: a test set of {self.n_test} items has a standard error of "
                                f"{standard_error_points(self.n_test):.1f} points; a miniature needs >= {MIN_TEST} "
                                f"(<= {MAX_SE_POINTS} points) (--smoke to try)")
        if self.n_val < 1:
            raise ProtocolError("protocol: the RL setting is chosen on a validation split; give n_val >= 1")
        return self

    def header(self, title: str) -> List[str]:
        lines = [f"# {title}", "", f"Command: `{self.command}`", ""]
        if self.smoke:
            lines += ["**SMOKE RUN: below the protocol's minimums (seeds, test size); no claim can be read from it.**",
                      ""]
        lines += [f"Protocol (docs/miniatures.md): seeds {self.seeds} (each an independent world, SFT checkpoint and "
                  f"RL seed), {self.n_test} test items per seed (standard error <= "
                  f"{standard_error_points(self.n_test):.1f} points), {self.n_val} validation items.", ""]
        return lines


def add_protocol_args(p: argparse.ArgumentParser, seeds: Sequence[int] = (0, 1, 2), n_test: int = MIN_TEST,
                      n_val: int = 128) -> None:
    p.add_argument("--seeds", type=int, nargs="+", default=list(seeds), help="protocol seeds (world + SFT + RL)")
    p.add_argument("--n-test", type=int, default=n_test, help=f"test items per seed (>= {MIN_TEST})")
    p.add_argument("--n-val", type=int, default=n_val, help="validation items per seed (the RL setting's choice)")
    p.add_argument("--lr-grid", type=float, nargs="+", default=list(DEFAULT_LR_GRID), help="RL learning rates tried")
    p.add_argument("--kl-grid", type=float, nargs="+", default=list(DEFAULT_KL_GRID), help="KL coefficients tried")
    p.add_argument("--smoke", action="store_true", help="allow fewer seeds / test items (labelled SMOKE RUN)")


def add_seed_process_args(ap: argparse.ArgumentParser, name: str, own: Callable[[argparse.ArgumentParser], None],
                          wait_min: float = 45.0, deadline_for: str = "an arm", record_only: Optional[str] = None,
                          notes: str = "--render: a markdown file of hand-written reading, printed after the claims"
                          ) -> None:
    """The arguments of a bench run as one process per protocol seed (``--only S``), then one ``--render`` from the
    seed records: ``own`` adds the bench's own arguments after ``--render``; ``--out runs/<name>_protocol``,
    ``--seed-dir bench/results/<name>_protocol``, ``--report docs/results/<name>.md``; ``deadline_for``: what
    ``--deadline`` holds back; ``record_only``: the help of ``--record-only``, where the bench has it."""
    ap.add_argument("--only", type=int, help="run this protocol seed alone (one process per seed)")
    ap.add_argument("--render", action="store_true", help="write the results file from the seed records")
    own(ap)
    ap.add_argument("--deadline", help=f"HH:MM UTC: {deadline_for} starts only if predicted to end before it")
    ap.add_argument("--wait-min", type=float, default=wait_min, help="minutes to wait for the other seeds' grids")
    ap.add_argument("--out", default=f"runs/{name}_protocol")
    ap.add_argument("--seed-dir", default=f"bench/results/{name}_protocol")
    ap.add_argument("--report", default=f"docs/results/{name}.md")
    if record_only is not None:
        ap.add_argument("--record-only", action="store_true", help=record_only)
    ap.add_argument("--notes", help=notes)
    ap.add_argument("overrides", nargs="*")


def write_seed_record(seed_dir: str | Path, seed: int, record: Dict) -> Dict:
    """``<seed_dir>/seed<S>.json``: one seed's record, compact on one line; returns ``record``."""
    d = Path(seed_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed{seed}.json").write_text(json.dumps(record, separators=(",", ":")) + "\n")
    return record


class SeedState:
    """``OUT/seed<S>/state.json``: what a seed has finished (grid scores, selection, evaluations, costs, minutes),
    rewritten after every stage so a rerun resumes where the last one stopped."""

    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text()) if path.exists() else {
            "grid": {}, "evals": {}, "costs": {}, "minutes": {}, "dropped": {}}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)


class Clock:
    """A stage's wall minutes (``state['minutes'][key]``) and this process's CPU minutes (``state['cpu_minutes']``:
    ``time.process_time``, one torch thread, so the machine's other load does not count)."""

    def __init__(self, st: SeedState, key: str):
        self.st, self.key = st, key

    def __enter__(self) -> "Clock":
        self.t, self.c = time.time(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.cpu_s = time.process_time() - self.c
            self.st.data["minutes"][self.key] = (time.time() - self.t) / 60
            self.st.data.setdefault("cpu_minutes", {})[self.key] = self.cpu_s / 60


def deadline_epoch(hhmm: Optional[str]) -> float:
    """Today's ``HH:MM`` UTC as epoch seconds (inf when not given)."""
    if not hhmm:
        return float("inf")
    h, m = (int(x) for x in hhmm.split(":"))
    now = datetime.now(timezone.utc)
    return now.replace(hour=h, minute=m, second=0, microsecond=0).timestamp()


def dropped_by_deadline(st: SeedState, names: Sequence[str], end: float, deadline: Optional[str],
                        note: Callable[[str], None] = lambda msg: None) -> bool:
    """True when arms ``names``, predicted to end at ``end`` (epoch s), would end after ``--deadline`` (HH:MM UTC):
    the reason is kept in ``st.data['dropped']`` (saved) and passed to ``note``. Else an earlier drop of them is
    forgotten and False."""
    if end > deadline_epoch(deadline):
        why = f"predicted to end at {time.strftime('%H:%M', time.gmtime(end))} UTC, after the deadline {deadline} UTC"
        for n in names:
            st.data["dropped"][n] = why
        st.save()
        note(f"{', '.join(names)} dropped: {why}")
        return True
    for n in names:
        st.data["dropped"].pop(n, None)
    return False


def seed_preflight(seed: int, sd: Path, st: SeedState, run: Callable[[], Dict], reasons: Callable[[Dict], List[str]],
                   smoke: bool, note: Callable[[str], None] = lambda why: None) -> Dict:
    """A seed's pre-flight record, ``<sd>/preflight.json`` when a run left it, else ``run()`` (timed as the stage
    ``preflight``), and its stop: ``st.data['stopped']``, the ``reasons(record)`` why RL is not spent on the seed,
    joined (empty: it goes on). A smoke run goes on: the reasons are kept in ``smoke_would_stop``, each passed to
    ``note``."""
    if (sd / "preflight.json").exists():
        rec = json.loads((sd / "preflight.json").read_text())
        log(f"[seed {seed}] pre-flight: reused {sd / 'preflight.json'}")
    else:
        with Clock(st, "preflight"):
            rec = run()
        st.save()
    why = reasons(rec)
    if smoke:  # a plumbing run goes on; what would have stopped a full run is kept in the record
        st.data["smoke_would_stop"] = "; ".join(why)
        for w in why:
            note(w)
        why = []
    st.data["stopped"] = "; ".join(why)
    st.save()
    return rec


def seed_process(seed: int, args, proto: Protocol, preflight: Callable[[Path, SeedState], Dict],
                 grid: Callable[[Path, SeedState, Dict], None], arms: Callable[[Path, SeedState, Selection], None],
                 write: Callable[[Dict, Dict], Dict]) -> Dict:
    """One protocol seed, run in its own process under ``args.out``/seed<S> and resumable (``SeedState``):
    ``preflight(sd, st)`` (the record; it sets ``st.data['stopped']``), where the seed stops when the pre-flight says
    why or at ``--until preflight``; ``grid(sd, st, record)`` (the start's evaluation and the grid), where
    ``--until grid`` stops it; ``seed_selection`` over every seed's grid; ``arms(sd, st, selection)``; then the
    process's own wall and CPU minutes (``this_run``). Returns ``write(record, st.data)``, the seed record."""
    sd = Path(args.out) / f"seed{seed}"
    sd.mkdir(parents=True, exist_ok=True)
    st = SeedState(sd / "state.json")
    st.data.setdefault("algo_means", {})
    t0, c0 = time.time(), time.process_time()
    rec = preflight(sd, st)
    if st.data["stopped"] or args.until == "preflight":
        log(f"[seed {seed}] " + (f"stopped: {st.data['stopped']}" if st.data["stopped"] else "pre-flight done"))
        return write(rec, st.data)
    grid(sd, st, rec)
    if args.until == "grid":
        return write(rec, st.data)
    sel = seed_selection(st, proto, Path(args.out), args.wait_min, seed_dir=Path(args.seed_dir))
    log(f"[seed {seed}] setting: lr {sel.lr:g}, KL {sel.kl:g} (from seeds {st.data['selection']['seeds']})")
    arms(sd, st, sel)
    st.data["minutes"]["this_run"] = (time.time() - t0) / 60
    st.data.setdefault("cpu_minutes", {})["this_run"] = (time.process_time() - c0) / 60
    st.save()
    return write(rec, st.data)


def seed_main(argv: Optional[Sequence[str]], parser: argparse.ArgumentParser, script: str,
              render: Callable[[argparse.Namespace, List[str]], object], run: Callable[[int, object, Protocol], Dict],
              instead: Callable[[argparse.Namespace], bool] = lambda args: False):
    """The command line of a bench run as seed processes (``add_seed_process_args``): ``--render`` returns
    ``render(args, argv)``; else ``--only S`` (one of ``--seeds``) runs that seed, ``run(S, args, protocol)``, on
    one torch thread and logs where its record went, unless ``instead(args)`` ran something else (True)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.render:
        return render(args, argv)
    if args.only is None or args.only not in args.seeds:
        raise SystemExit("give --only S (one of --seeds) to run a seed, or --render")
    proto = protocol_from_args(args, script, argv)
    import torch

    torch.set_num_threads(1)
    if instead(args):
        return None
    rec = run(args.only, args, proto)
    log(f"[seed {args.only}] record written: {Path(args.seed_dir) / f'seed{args.only}.json'} "
        f"(evals: {', '.join(rec.get('evals', {}))})")
    return None


def add_stage_args(ap: argparse.ArgumentParser) -> None:
    """``--until`` (the stage ``seed_process`` stops after) and ``--model`` (the SFT's start)."""
    ap.add_argument("--until", choices=["preflight", "grid", "arms"], default="arms", help="stop after this stage")
    ap.add_argument("--model", default="base", help="the SFT's start (model.path)")


def protocol_from_args(args, script: str, argv: Optional[Sequence[str]] = None,
                       small_effect: bool = False) -> Protocol:
    argv = list(sys.argv[1:] if argv is None else argv)
    return Protocol(command=shlex.join(["python", script, *argv]), seeds=list(args.seeds), n_test=args.n_test,
                    n_val=args.n_val, small_effect=small_effect, smoke=args.smoke, lr_grid=list(args.lr_grid),
                    kl_grid=list(args.kl_grid)).check()


@dataclass(frozen=True)
class SeedPlan:
    seed: int
    world_seed: int
    sft_seed: int
    rl_seed: int


def seed_plan(seed: int) -> SeedPlan:
    """World, SFT and RL seeds of one protocol seed: distinct streams, so seeds differ in all three."""
    return SeedPlan(seed, world_seed=10_000 + seed, sft_seed=20_000 + seed, rl_seed=30_000 + seed)


# ---------------------------------------------------------------- the RL setting, chosen on validation
@dataclass
class Selection:
    lr: float
    kl: float
    scores: Dict[Tuple[float, float], float] = field(default_factory=dict)  # mean validation accuracy per setting


def select_setting(protocol: Protocol, val_score: Callable[[float, float], float]) -> Selection:
    """Run ``val_score(lr, kl)`` (the bench's true-reward arm, validation accuracy) over the grid; the best mean
    wins, ties to the smaller lr and then the larger KL. The winner is used by every arm."""
    scores = {(float(lr), float(kl)): float(val_score(lr, kl)) for lr in protocol.lr_grid for kl in protocol.kl_grid}
    best = max(scores, key=lambda s: (round(scores[s], 12), -s[0], s[1]))
    return Selection(lr=best[0], kl=best[1], scores=scores)


def grid_key(lr: float, kl: float) -> str:
    """A grid point's key in a seed's state and record."""
    return f"lr{lr:g}_kl{kl:g}"


def pooled_selection(proto: Protocol, out: Path, wait_min: float, poll_s: float = 20.0,
                     grid_of: Optional[Callable[[int], Dict[str, float]]] = None,
                     key: Callable[[float, float], str] = grid_key, require_all: Optional[str] = None,
                     seed_dir: Optional[Path] = None) -> Selection:
    """Wait (up to ``wait_min``) for every seed's grid, then ``select_setting`` on the mean validation accuracy over
    the seeds that finished it (their list kept in ``Selection.seeds``). ``grid_of(seed)``: the seed's scores so far,
    ``{key(lr, kl): accuracy}`` (default: ``grid`` of ``OUT/seed<S>/state.json``, ``{}`` before it exists). After the
    wait the seeds that finished go on alone; with ``require_all`` (the bench's name) an unfinished seed stops the
    bench instead (``SystemExit`` naming the seeds). A seed whose state says its pre-flight ``stopped`` it (no RL, so
    no grid will come) is not waited for. With ``seed_dir``, a seed without a run state is read from its committed
    record ``<seed_dir>/seed<S>.json`` (its ``grid`` and ``stopped``): a seed added later pools with the earlier
    seeds' grids although their run folders are gone."""
    def state(s: int) -> Dict:
        for p in (out / f"seed{s}" / "state.json", Path(seed_dir) / f"seed{s}.json" if seed_dir else None):
            if p is not None and p.exists():
                return json.loads(p.read_text())
        return {}

    grid_of = grid_of or (lambda s: state(s).get("grid", {}))
    keys = [key(lr, kl) for lr in proto.lr_grid for kl in proto.kl_grid]
    t0 = time.time()
    while True:
        grids = {}
        for s in proto.seeds:
            g = grid_of(s)
            if all(k in g for k in keys):
                grids[s] = g
        waiting = [s for s in proto.seeds if s not in grids and not state(s).get("stopped")]
        if not waiting or time.time() - t0 > 60 * wait_min:
            break
        time.sleep(poll_s)
    missing = [s for s in proto.seeds if s not in grids and not state(s).get("stopped")]
    if require_all and missing:
        raise SystemExit(f"{require_all}: seeds {missing} have not finished their selection grid after {wait_min} min "
                         f"(run them with --only S)")
    if not grids:
        raise RuntimeError(f"no seed finished the grid within {wait_min} min")
    sel = select_setting(proto, lambda lr, kl: sum(g[key(lr, kl)] for g in grids.values()) / len(grids))
    sel.seeds = sorted(grids)
    return sel


def grid_todo(st: SeedState, proto: Protocol, grid_dir: Path) -> List[Tuple[float, float, str]]:
    """The grid points ``(lr, kl, grid_key)`` a seed has still to run: not in ``st.data['grid']`` or without their
    kept model ``<grid_dir>/select_lr<lr>_kl<kl>/final`` (``arm_val_score(keep=True)``)."""
    return [(lr, kl, grid_key(lr, kl)) for lr in proto.lr_grid for kl in proto.kl_grid
            if not (grid_key(lr, kl) in st.data["grid"] and (grid_dir / f"select_lr{lr:g}_kl{kl:g}" / "final").is_dir())]


def seed_selection(st: SeedState, proto: Protocol, out: Path, wait_min: float,
                   seed_dir: Optional[Path] = None) -> Selection:
    """The setting every arm of this seed uses: ``pooled_selection`` over the seeds' grids (``seed_dir``: the
    committed records stand in for seeds without a run state), run once (timed as the stage ``wait``) and kept in
    ``st.data['selection']`` so that a rerun reuses it."""
    if "selection" not in st.data:
        with Clock(st, "wait"):
            sel = pooled_selection(proto, out, wait_min, seed_dir=seed_dir)
            st.data["selection"] = {"lr": sel.lr, "kl": sel.kl, "seeds": sel.seeds}
        st.save()
    return Selection(st.data["selection"]["lr"], st.data["selection"]["kl"])


def apply_setting(cfg, sel: Selection):
    """A copy of ``cfg`` with the selected ``train.lr`` and ``algorithm.kl_coef``."""
    cfg = copy.deepcopy(cfg)
    cfg.train.lr, cfg.algorithm.kl_coef = sel.lr, sel.kl
    return cfg


def arm_val_score(cfgs: Dict[int, object], steps: int, val_paths: Dict[int, str],
                  keep: bool = False, evaluate: Optional[Callable] = None) -> Callable[[float, float], float]:
    """``val_score`` for ``select_setting``: per seed, a true-reward arm (``bench/_arms.Arm``) at ``(lr, kl)`` for
    ``steps`` RL steps, then its greedy accuracy on that seed's VALIDATION file (``data.test`` swapped for it, so the
    test split is never seen); the mean over seeds. Each run writes under ``<out_dir>/select_lr<lr>_kl<kl>``;
    ``keep`` also writes its step metrics to ``<that>/history.json`` and its model to ``<that>/final`` (the chosen
    run can then serve as the bench's true-reward arm: same config, seed and steps). ``evaluate(trainer)`` replaces
    ``trainer.evaluate`` (it returns ``eval/accuracy``; e.g. a sampled accuracy)."""
    from _arms import Arm

    def score(lr: float, kl: float) -> float:
        accs = []
        for seed, cfg in cfgs.items():
            c = apply_setting(cfg, Selection(lr, kl))
            c.data.test = val_paths[seed]
            c.train.out_dir = str(Path(cfg.train.out_dir) / f"select_lr{lr:g}_kl{kl:g}")
            arm = Arm(f"select lr {lr:g} kl {kl:g} seed {seed}", c)
            for _ in range(steps):
                arm.step()
            ev = arm.trainer.evaluate if evaluate is None else (lambda t=arm.trainer: evaluate(t))
            accs.append(float(arm.on_own_stream(ev)["eval/accuracy"]))
            if keep:  # the step metrics, then the model at <out_dir>/final
                Path(c.train.out_dir).mkdir(parents=True, exist_ok=True)
                (Path(c.train.out_dir) / "history.json").write_text(json.dumps(arm.history))
                arm.finish()
            arm.trainer = None  # free the model before the next run
        return sum(accs) / len(accs)

    return score


@dataclass
class SeedArms:
    """The RL arms of one seed process after its grid (``pacg_protocol``, ``dspo_protocol``), each at the chosen
    setting from the seed's SFT start, its results kept in ``st``: ``config(name)``: the arm's config;
    ``evaluate(name, model_dir, cfg)``: its test evaluation (``st.data['evals'][name]``); ``algo_means(history)``: its
    step metrics kept in ``st.data['algo_means'][name]``; ``done(evaluation)``: the end of its log line."""
    seed: int
    st: SeedState
    steps: int
    config: Callable[[str], object]
    evaluate: Callable[[str, str, object], Dict]
    algo_means: Callable[[List[Dict[str, float]]], Dict[str, float]]
    done: Callable[[Dict], str]

    def adopt(self, name: str, run_dir: Path, cfg) -> None:
        """The grid's chosen run ``run_dir`` (``arm_val_score(keep=True)``: ``history.json`` and ``final``) is arm
        ``name``: its step costs and metrics from the history, its model evaluated (timed as ``eval_<name>``) with
        ``cfg``; nothing when already evaluated."""
        from bpo_arms import step_costs

        if name in self.st.data["evals"]:
            return
        hist = json.loads((run_dir / "history.json").read_text())
        self.st.data["costs"][name], self.st.data["algo_means"][name] = step_costs(hist), self.algo_means(hist)
        with Clock(self.st, f"eval_{name}"):
            self.st.data["evals"][name] = self.evaluate(name, str(run_dir / "final"), cfg)
        self.st.save()

    def run(self, name: str) -> None:
        """Arm ``name`` for ``steps`` RL steps (timed as ``rl_<name>``; its costs: ``bpo_arms.step_costs`` and the
        CPU seconds per step), its model exported, then evaluated (timed as ``eval_<name>``); saved."""
        from _arms import Arm, step_logged
        from bpo_arms import step_costs

        with Clock(self.st, f"rl_{name}"):
            arm = Arm(name, self.config(name))
            c = time.process_time()
            step_logged(arm, self.steps, self.seed)
            self.st.data["costs"][name] = dict(step_costs(arm.history),
                                               cpu_step_s=(time.process_time() - c) / self.steps)
            self.st.data["algo_means"][name] = self.algo_means(arm.history)
            path = arm.finish()
        with Clock(self.st, f"eval_{name}"):
            self.st.data["evals"][name] = self.evaluate(name, path, arm.cfg)
        self.st.save()

    def run_later(self, names: Sequence[str], ref: str, step_ratio: Dict[str, float], eval_margin_min: float,
                  deadline: Optional[str]) -> None:
        """``run`` each of ``names`` in order, skipping those already evaluated; one starts only when predicted to
        end before ``deadline`` (``dropped_by_deadline``): now + steps x ``ref``'s median step seconds x
        ``step_ratio[name]`` + ``eval_margin_min`` minutes."""
        for name in names:
            if name in self.st.data["evals"]:
                continue
            end = time.time() + self.steps * self.st.data["costs"][ref]["median_step_s"] * step_ratio[name] \
                + 60 * eval_margin_min
            if dropped_by_deadline(self.st, [name], end, deadline, self.note):
                continue
            self.run(name)
            self.note(f"{name} done: {self.done(self.st.data['evals'][name])}")

    def note(self, msg: str) -> None:
        log(f"[seed {self.seed}] {msg}")


def setting_lines(sel: Selection) -> List[str]:
    kls = sorted({k for _, k in sel.scores})
    lines = ["## RL setting, chosen on the validation split (the same for every arm)", "",
             "| lr | " + " | ".join(f"KL {k:g}" for k in kls) + " |", "|---|" + "---:|" * len(kls)]
    for lr in sorted({lr for lr, _ in sel.scores}):
        cells = [f"{100 * sel.scores[(lr, k)]:.1f}" + (" **(chosen)**" if (lr, k) == (sel.lr, sel.kl) else "")
                 for k in kls]
        lines.append(f"| {lr:g} | " + " | ".join(cells) + " |")
    return lines + ["", f"Chosen: lr {sel.lr:g}, KL {sel.kl:g} (validation accuracy %, true-reward arm).", ""]


# ---------------------------------------------------------------- the coin-flip control
CONTROL_OF = {"accuracy": "coin_flip", "stream": "stream_coin_flip",  # true reward -> its coin-flip control
              "dspo_accuracy": "dspo_coin_flip"}


def coin_flip_config(cfg):
    """A copy of ``cfg`` whose correctness reward is its coin-flip control (same weight and parameters): ``accuracy``
    -> ``coin_flip``; without ``accuracy``, Stream-GDPO's ``stream`` -> ``stream_coin_flip`` (R_out a coin, R_tool
    credited by it, R_fmt and R_mem kept), DSPO's ``dspo_accuracy`` -> ``dspo_coin_flip`` (``mmrl.rewards.coin_flip``)."""
    cfg = copy.deepcopy(cfg)
    names = [r.name for r in cfg.rewards]
    true = next((n for n in CONTROL_OF if n in names), None)
    if true is None:
        raise ProtocolError(f"protocol: the coin-flip arm replaces the 'accuracy' (or 'stream', 'dspo_accuracy') "
                            f"reward, and this config has none (rewards: {names})")
    for r in cfg.rewards:
        if r.name == true:
            r.name = CONTROL_OF[true]
    return cfg


# ---------------------------------------------------------------- the results file
class Results:
    """Per-seed values ``{arm: {seed: value}}`` of named metrics, rendered with CIs; written once, whole."""

    def __init__(self, protocol: Protocol, title: str):
        self.protocol, self.title = protocol, title
        self.sections: List[List[str]] = []

    def add(self, lines: Sequence[str]) -> None:
        self.sections.append(list(lines))

    def arms_table(self, metric: str, values: Dict[str, Dict[int, float]], scale: float = 100.0,
                   missing: Optional[Dict[str, str]] = None) -> List[str]:
        """One row per arm: mean [95% CI] over seeds, then each seed's value. The SFT start and the coin-flip arm
        must be present unless ``missing`` gives the reason for leaving one out (printed under the table)."""
        missing = missing or {}
        for need in (SFT_ARM, COIN_ARM):
            if need not in values and need not in missing:
                raise ProtocolError(f"protocol: table '{metric}' has no '{need}' arm and gives no reason why")
        seeds = self.protocol.seeds
        lines = [f"## {metric}", "", "| arm | mean [95% CI] | " + " | ".join(f"seed {s}" for s in seeds) + " |",
                 "|---|---:|" + "---:|" * len(seeds)]
        for arm, per in values.items():
            xs = [per.get(s, float("nan")) for s in seeds]
            cells = ["—" if math.isnan(x) else f"{scale * x:.1f}" for x in xs]
            lines.append(f"| {arm} | {fmt_ci(xs, scale)} | " + " | ".join(cells) + " |")
        lines += [f"\n{arm}: not run ({why})" for arm, why in missing.items()]
        return lines + [""]

    def paired_table(self, metric: str, values: Dict[str, Dict[int, float]], pairs: Sequence[Tuple[str, str]],
                     scale: float = 100.0) -> List[str]:
        """a − b within each seed (both arms share the seed's world and SFT start): mean [95% CI], per seed, and
        the count of seeds where a > b."""
        seeds = self.protocol.seeds
        lines = [f"## {metric}: paired differences", "",
                 "| a − b | mean [95% CI] | " + " | ".join(f"seed {s}" for s in seeds) + " | seeds a > b |",
                 "|---|---:|" + "---:|" * len(seeds) + "---:|"]
        for a, b in pairs:
            d = [values[a].get(s, float("nan")) - values[b].get(s, float("nan")) for s in seeds]
            cells = ["—" if math.isnan(x) else f"{scale * x:+.1f}" for x in d]
            wins = sum(1 for x in d if not math.isnan(x) and x > 0)
            m, lo, hi = ci95([scale * x for x in d])
            verdict = "" if math.isnan(lo) else (" (CI above 0)" if lo > 0 else " (CI below 0)" if hi < 0 else "")
            lines.append(f"| {a} − {b} | {fmt_ci(d, scale, signed=True)}{verdict} | " + " | ".join(cells)
                         + f" | {wins}/{len([x for x in d if not math.isnan(x)])} |")
        return lines + [""]

    def chosen_setting(self, recs: Dict[int, Dict], basis: str) -> List[str]:
        """From the seed records (``grid``: ``{grid_key: validation accuracy}``; ``selection``: lr, kl, seeds), the
        grid's mean over the seeds that finished it with the chosen setting (``setting_lines``), then which seeds and
        ``basis`` it was chosen from; a line saying so where no setting was chosen."""
        keys = [(lr, kl) for lr in self.protocol.lr_grid for kl in self.protocol.kl_grid]
        done = [r for r in recs.values() if all(grid_key(lr, kl) in r.get("grid", {}) for lr, kl in keys)]
        sels = {s: r["selection"] for s, r in recs.items() if "selection" in r}
        if not done or not sels:
            return ["", "No seed finished the grid: no setting was chosen.", ""]
        sel = next(iter(sels.values()))
        scores = {(lr, kl): sum(r["grid"][grid_key(lr, kl)] for r in done) / len(done) for lr, kl in keys}
        pools: Dict[Tuple, List[int]] = {}  # seeds added later pool with the earlier ones: say who chose from what
        for s, x in sels.items():
            pools.setdefault((x["lr"], x["kl"], tuple(x["seeds"])), []).append(s)
        same = len({(lr, kl) for lr, kl, _ in pools}) == 1
        if len(pools) == 1:
            origin = f"from the mean over seeds {sel['seeds']}"
        else:
            origin = ", ".join(f"seeds {', '.join(map(str, who))} from the mean over seeds {list(pool)}"
                               + ("" if same else f" (lr {lr:g}, KL {kl:g})") for (lr, kl, pool), who in pools.items())
        head = (f"Chosen: lr {sel['lr']:g}, KL {sel['kl']:g}, " if same else "Chosen, NOT the same for every seed: ")
        return [""] + setting_lines(Selection(sel["lr"], sel["kl"], scores))[:-2] + [
            head + f"{origin} {basis}" + ("; the same for every arm and seed." if same else "."), ""]

    def render(self) -> str:
        out = self.protocol.header(self.title)
        for sec in self.sections:
            out += sec
        return "\n".join(out).rstrip() + "\n"

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.render())
        return path
