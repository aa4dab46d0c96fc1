"""The VHOP-Router miniature from the pre-trained embedder on the base (issue 29 item 4, ``docs/miniatures.md``):
one process per protocol seed, then one render of the section at the top of ``docs/results/vhop.md``.

    python bench/vhop_protocol.py --seeds 0 1 2 --only S [--train-worlds 4] [--n-train 50] [--heldout-worlds 4]
        [--n-test 100] [--size 56] [--pretrain-steps 500] [--sft-steps 300] [--il-steps 40] [--rl-steps 15]
        [--pooling last] [--sft-lr 1e-4] [--il-lr 1e-4] [--rl-lr 1e-4] [--out runs/vhop_protocol]
        [--seed-dir bench/results/vhop_protocol]
        [--smoke]
    python bench/vhop_protocol.py --seeds 0 1 2 --render [--report docs/results/vhop.md] [--notes FILE]

Per seed (``seed_plan``: its own worlds, SFT and RL seed), each stage resumable (``OUT/seed<S>/state.json``):

1. **worlds**: ``--train-worlds`` VHOP worlds (train split, ``--n-train`` queries each, world seeds
   ``100 * world_seed + k``) and ``--heldout-worlds`` held-out worlds (test split, ``--n-test`` queries each: world
   ``world_seed`` as the pre-flight's, then ``100 * world_seed + 50 + j``), ``bench/vhop_preflight.WORLD`` at
   ``--size`` px; ``--heldout-worlds x --n-test`` test queries in all.
2. **pre-flight**: ``Embedder.from_pretrained(--model)`` (``base``; ``--pooling``, last by default: the stage
   configs') pre-trained with the attribute heads
   (``vhop_preflight.pretrain``: emblem, main object, scene; ``--pretrain-steps`` on the train worlds' images) and
   saved (``OUT/seed<S>/pretrained``, an ``Embedder.save`` folder); the output probes' held-out emblem, main and
   scene accuracy (``score_probe``, fit on the train worlds' images) and hop-1 / hop-2 top-1 of single-step
   retrieval (``vhop_preflight.retrieval``, pooled over the held-out worlds) before any router stage.
3. **router stages** from that folder (``model.path`` = a saved embedder, ``model.pooling`` = ``--pooling``): SFT
   (configs/vhop_sft.yaml) on every train world as one set, imitation (vhop_imitate.yaml) from it, RL
   (vhop_rl.yaml) from imitation with the KL to SFT; after each, greedy chains on every held-out query
   (``evaluate_router`` over the held-out worlds joined: each query in its own corpus).
4. **after SFT**: hop-1 / hop-2 top-1 again on the SFT embedder (the rule's hop-1 half), and the single-step
   retriever on it (top ``router.max_hops`` images of the query embedding per held-out world; success = every
   gold image among them), as ``bench/vhop.py``.

The RL setting is the config's, not chosen on a validation split, so a run without ``--n-val`` >= 1 is refused by
the protocol and must say ``--smoke`` (its results are labelled so). The seed record (``--seed-dir``/seed<S>.json)
is small and committed; ``--render`` builds the section from the records (``bench/vhop_protocol_table.py``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _protocol import (Clock, SeedState, add_protocol_args, add_seed_process_args,  # noqa: E402
                       protocol_from_args, seed_plan, write_seed_record)
from vhop_preflight import WORLD, extract, load_world_images, pretrain, retrieval, score_probe  # noqa: E402
from vhop_preflight import attribute_labels  # noqa: E402
from vhop_protocol_table import render_main  # noqa: E402

SCRIPT = "bench/vhop_protocol.py"
STAGES = ("sft", "imitate", "rl")
PROBED = ("emblem", "main", "scene")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}] {msg}", flush=True)


# ---------------------------------------------------------------- worlds
def world_seeds(world_seed: int, train: int, heldout: int) -> Tuple[List[int], List[int]]:
    """(train world seeds, held-out world seeds): ``100 ws + k`` (k = 1..train); ``ws``, then ``100 ws + 50 + j``."""
    if train >= 50 or heldout > 50:
        raise ValueError(f"at most 49 train and 50 held-out worlds per seed, got {train} and {heldout}")
    return ([100 * world_seed + k for k in range(1, train + 1)],
            [world_seed] + [100 * world_seed + 50 + j for j in range(1, heldout)])


def make_worlds(sd: Path, a, seed: int) -> Tuple[List[Path], List[Path]]:
    """Write (once) the seed's worlds; returns (train world dirs, held-out world dirs)."""
    from mmrl.data.synth_vhop import make_vhop_world

    tr, ho = world_seeds(seed_plan(seed).world_seed, a.train_worlds, a.heldout_worlds)
    train = [sd / "worlds" / f"train{k}" for k in range(1, len(tr) + 1)]
    held = [sd / "worlds" / f"heldout{j}" for j in range(len(ho))]
    for d, ws in zip(train, tr):
        if not (d / "queries_train.json").exists():
            make_vhop_world(str(d), a.n_train, 0, seed=ws, size=a.size, **WORLD)
    for d, ws in zip(held, ho):
        if not (d / "queries_test.json").exists():
            make_vhop_world(str(d), 0, a.n_test, seed=ws, size=a.size, **WORLD)
    return train, held


# ---------------------------------------------------------------- measurements
def pooled_hops(parts: Sequence[dict]) -> Dict[str, float]:
    """``vhop_preflight.retrieval`` rows of several worlds pooled: hop-1 rates weighted by ``n_hop1``, hop-2 by
    ``n_hop2``."""
    n1, n2 = sum(p["n_hop1"] for p in parts), sum(p["n_hop2"] for p in parts)
    out = {"n_hop1": n1, "n_hop2": n2}
    for k in ("hop1", "hop1_chance", "hop1_scene_only"):
        out[k] = sum(p[k] * p["n_hop1"] for p in parts) / n1
    for k in ("hop2", "hop2_scene_only"):
        out[k] = sum(p[k] * p["n_hop2"] for p in parts) / n2
    return out


def hops(emb, held: Sequence[Path]) -> Dict[str, float]:
    """Hop-1 and hop-2 top-1 of single-step retrieval with ``emb``, each held-out world over its own corpus."""
    import torch

    parts = []
    for d in held:
        corpus, queries = load_world_images(str(d), "test")
        with torch.no_grad():
            img = torch.cat([emb.embed_images([corpus.image(it.id) for it in corpus.items[s:s + 32]])
                             for s in range(0, len(corpus.items), 32)])
        parts.append(retrieval(emb, corpus, queries, img))
    return pooled_hops(parts)


def probes(emb, train: Sequence[Path], held: Sequence[Path], wd: float) -> Dict[str, dict]:
    """Held-out accuracy of the output probes (emblem, main object, scene), fit on the train worlds' images."""
    import torch

    def feats(dirs, split):
        xs, labs = [], []
        for d in dirs:
            corpus = load_world_images(str(d), split)[0]
            xs.append(extract(emb, corpus)[0])
            labs += [attribute_labels(it.meta) for it in corpus.items]
        return torch.cat(xs), labs

    (xa, la), (xb, lb) = feats(train, "train"), feats(held, "test")
    out = {}
    for attr in PROBED:
        ia, ib = [i for i, v in enumerate(la) if attr in v], [i for i, v in enumerate(lb) if attr in v]
        out[attr] = score_probe(xa[ia], [la[i][attr] for i in ia], xb[ib], [lb[i][attr] for i in ib], wd)
    return out


def single_step(emb, held: Sequence[Path], k: int) -> Dict[str, float]:
    """Success by level of the top-``k`` single-step retriever on ``emb``, each held-out world over its own corpus
    (success = every gold image among the k), pooled over the worlds."""
    from mmrl.retrieval.index import CorpusIndex
    from mmrl.retrieval.retriever import SingleStepRetriever
    from mmrl.retrieval.train_common import success_by_level
    from mmrl.retrieval.train_data import load_split

    queries, chains = [], []
    for d in held:
        corpus, qs = load_split(str(d / "queries_test.json"), "data.eval", False, say=lambda *_: None)
        index = CorpusIndex.build(emb.eval(), corpus)
        found = SingleStepRetriever(emb).retrieve_batch([q.query for q in qs], index, k)
        queries += qs
        chains += [q.chain if set(q.chain) <= set(f.ids) else [] for q, f in zip(qs, found)]
    return success_by_level(queries, chains)


def level_counts(held: Sequence[Path]) -> Dict[str, int]:
    """Held-out queries per level (``L1`` ..) and in all."""
    from mmrl.retrieval.train_data import load_split

    qs = load_split([str(d / "queries_test.json") for d in held], "data.eval", False, say=lambda *_: None)[1]
    out = {f"L{lvl}": sum(q.level == lvl for q in qs) for lvl in sorted({q.level for q in qs})}
    out["all"] = len(qs)
    return out


# ---------------------------------------------------------------- stages
def stage_config(stage: str, sd: Path, a, seed: int, train: Sequence[Path], held: Sequence[Path]):
    """The stage's config: configs/vhop_<stage>.yaml from the saved pre-trained embedder, the flags' steps and lr,
    the SFT seed for SFT and imitation and the RL seed for RL."""
    from mmrl.retrieval.train_stages import load_stage_config

    files = {"sft": "vhop_sft.yaml", "imitate": "vhop_imitate.yaml", "rl": "vhop_rl.yaml"}
    steps = {"sft": a.sft_steps, "imitate": a.il_steps, "rl": a.rl_steps}[stage]
    lr = {"sft": a.sft_lr, "imitate": a.il_lr, "rl": a.rl_lr}[stage]
    plan = seed_plan(seed)
    over = [f"model.path={sd / 'pretrained'}", f"model.pooling={a.pooling}", f"model.max_pixels={a.size * a.size}",
            "data.train=[" + ",".join(str(d / "queries_train.json") for d in train) + "]",
            "data.eval=[" + ",".join(str(d / "queries_test.json") for d in held) + "]",
            f"train.out_dir={sd / stage}", f"train.steps={steps}", f"train.save_every={steps}", f"train.lr={lr}",
            f"train.seed={plan.rl_seed if stage == 'rl' else plan.sft_seed}"]
    if stage == "imitate":
        over.append(f"train.init_from={sd / 'sft'}")
    if stage == "rl":
        over += [f"train.init_from={sd / 'imitate'}", f"rl.ref_from={sd / 'sft'}"]
    return load_stage_config(stage, [str(REPO / "configs" / files[stage])], over + list(a.overrides))


def run_router_stage(stage: str, sd: Path, a, seed: int, train, held) -> Dict[str, float]:
    """Train the stage (a rerun overwrites an unfinished one) and return its held-out evaluation."""
    from mmrl.retrieval.train_imitate import ImitateLoss
    from mmrl.retrieval.train_loop import run_stage
    from mmrl.retrieval.train_rl import RLLoss
    from mmrl.retrieval.train_sft import SFTLoss

    loss = {"sft": SFTLoss, "imitate": ImitateLoss, "rl": RLLoss}[stage]()
    return run_stage(stage_config(stage, sd, a, seed, train, held), loss, overwrite=True, quiet=True)


TRAIN_SIGNAL = {"sft": "acc", "imitate": "agree", "rl": "success"}  # in-batch accuracy, oracle agreement, success


def train_signal(sd: Path, stage: str, last: int = 50) -> float:
    """Mean of the stage's training signal (``TRAIN_SIGNAL``) over its last ``last`` steps (``metrics.jsonl``)."""
    rows = [json.loads(x) for x in (sd / stage / "metrics.jsonl").read_text().splitlines()][-last:]
    xs = [r[TRAIN_SIGNAL[stage]] for r in rows if TRAIN_SIGNAL[stage] in r]
    return sum(xs) / len(xs) if xs else float("nan")


def preflight_stage(sd: Path, a, seed: int, train, held) -> Dict:
    """Pre-train the base embedder with the attribute heads, save it, and measure it (probes, hop-1 / hop-2)."""
    import torch

    from mmrl.retrieval.embedder import Embedder

    torch.manual_seed(seed_plan(seed).sft_seed)
    emb = Embedder.from_pretrained(a.model, pooling=a.pooling, max_pixels=a.size * a.size).eval()
    corpora = [(load_world_images(str(d), "train")[0],) for d in train]
    losses = pretrain(emb, corpora, a.pretrain_steps, a.pretrain_lr, seed_plan(seed).sft_seed)
    emb.save(str(sd / "pretrained"))
    return {"probes": probes(emb, train, held, a.wd), "hops": hops(emb, held),
            "pretrain_loss": {"first": losses[:10], "last": losses[-10:]}}


def after_sft(sd: Path, a, held) -> Dict:
    from mmrl.retrieval.embedder import Embedder

    emb = Embedder.from_pretrained(str(sd / "sft" / "final" / "embedder")).eval()
    return {"hops": hops(emb, held), "single_step": single_step(emb, held, a.max_hops)}


def run_one(seed: int, a, proto) -> Dict:
    """Every stage of one seed not yet in its state (``OUT/seed<S>/state.json``), the record after each."""
    sd = Path(a.out) / f"seed{seed}"
    sd.mkdir(parents=True, exist_ok=True)
    st = SeedState(sd / "state.json")
    train, held = make_worlds(sd, a, seed)
    st.data["levels"] = level_counts(held)
    if "preflight" not in st.data:
        with Clock(st, "preflight"):
            st.data["preflight"] = preflight_stage(sd, a, seed, train, held)
        st.save()
        log(f"[seed {seed}] pre-flight: {summary(st.data['preflight'])}")
        write_record(seed, st.data, a, proto)
    for stage in STAGES:
        if stage in st.data["evals"]:
            continue
        with Clock(st, stage):
            ev = run_router_stage(stage, sd, a, seed, train, held)
        st.data["evals"][stage] = dict(ev, train_signal=train_signal(sd, stage))
        if stage == "sft":
            with Clock(st, "after_sft"):
                st.data["after_sft"] = after_sft(sd, a, held)
            st.data["evals"]["single_step"] = st.data["after_sft"]["single_step"]
            log(f"[seed {seed}] after SFT: {summary(st.data['after_sft'])}")
        st.save()
        log(f"[seed {seed}] router {stage}: success {ev['success']:.3f} "
            f"({st.data['minutes'][stage]:.1f} min, {st.data['cpu_minutes'][stage]:.1f} CPU min)")
        write_record(seed, st.data, a, proto)
    return write_record(seed, st.data, a, proto)


def summary(block: Dict) -> str:
    h = block["hops"]
    head = (f"emblem {block['probes']['emblem']['acc']:.3f} (chance {block['probes']['emblem']['chance']:.3f}), "
            if "probes" in block else "")
    return (head + f"hop-1 {h['hop1']:.3f} (scene-only {h['hop1_scene_only']:.3f}, n={h['n_hop1']}), "
            f"hop-2 {h['hop2']:.3f} (scene-only {h['hop2_scene_only']:.3f}, n={h['n_hop2']})")


SETTINGS = ("model", "pooling", "train_worlds", "n_train", "heldout_worlds", "n_test", "size", "pretrain_steps",
            "pretrain_lr", "wd", "sft_steps", "il_steps", "rl_steps", "sft_lr", "il_lr", "rl_lr", "max_hops",
            "overrides")


def write_record(seed: int, state: Dict, a, proto) -> Dict:
    """``SEED_DIR/seed<S>.json``: the command, settings, plan and the seed's state (no weights)."""
    rec = {"seed": seed, "command": proto.command, "plan": vars(seed_plan(seed)),
           "settings": {k: getattr(a, k) for k in SETTINGS}, **state}
    return write_seed_record(a.seed_dir, seed, rec)


# ---------------------------------------------------------------- arguments
def own_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default="base", help="the embedder's backbone before pre-training (tiny: tests)")
    ap.add_argument("--train-worlds", type=int, default=4)
    ap.add_argument("--n-train", type=int, default=50, help="queries per train world")
    ap.add_argument("--heldout-worlds", type=int, default=4, help="held-out worlds (x --n-test queries each)")
    ap.add_argument("--size", type=int, default=56, help="image side (px)")
    ap.add_argument("--pooling", choices=("last", "mean"), default="last",
                    help="the embedder's pooling, pre-training and stages alike (the stage configs' is last)")
    ap.add_argument("--pretrain-steps", type=int, default=500)
    ap.add_argument("--pretrain-lr", type=float, default=3e-4)
    ap.add_argument("--wd", type=float, default=1e-3, help="the probes' L2 weight")
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--il-steps", type=int, default=40)
    ap.add_argument("--rl-steps", type=int, default=15)
    ap.add_argument("--sft-lr", type=float, default=1e-4)
    ap.add_argument("--il-lr", type=float, default=1e-4)
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument("--max-hops", type=int, default=6, help="the configs' router.max_hops = the single step's k")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_protocol_args(ap, n_test=100, n_val=0)
    add_seed_process_args(ap, "vhop", own_args)
    return ap


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    if a.render:
        return render_main(a, argv, SCRIPT)
    if a.only is None or a.only not in a.seeds:
        raise SystemExit("give --only S (one of --seeds) to run a seed, or --render")
    proto = protocol_from_args(_total(a), SCRIPT, argv)
    import torch

    torch.set_num_threads(1)
    rec = run_one(a.only, a, proto)
    log(f"[seed {a.only}] record written: {Path(a.seed_dir) / f'seed{a.only}.json'} (evals: {', '.join(rec['evals'])})")
    return rec


def _total(a):
    """The protocol's view of the arguments: the test size is every held-out world's queries."""
    return argparse.Namespace(**dict(vars(a), n_test=a.heldout_worlds * a.n_test))


if __name__ == "__main__":
    main()
