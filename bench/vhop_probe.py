"""Learnability probe for the VHOP world: SFT the tiny embedder on one world's training split, then the held-out
top-1 accuracy of each gold hop (state (q, g[:t]) -> g[t], over the test split's own corpus, chain images left
out), split into t = 0 (text -> the described image) and t >= 1 (following an emblem), next to the chance of
picking g[t] among the other images of its scene (what matching the scene alone gives).

``--worlds N`` trains on the training splits of N worlds (seeds seed+1 .. seed+N, ``--n-train`` queries each, joined
by ``data.train`` as a glob; each query over its own corpus) and evaluates on the test split of world ``seed``.

    OMP_NUM_THREADS=1 python bench/vhop_probe.py --out /tmp/vhop-probe --steps 300 --shapes 3 --emblem-scale 0.36
    OMP_NUM_THREADS=1 python bench/vhop_probe.py --out /tmp/vhop-many --worlds 30 --n-train 20 --shapes 1 --scene-cap 8
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]


def hop_accuracy(router, corpus, queries) -> dict:
    """Top-1 of every gold state over ``corpus``; 1/(scene size - t) averaged (scene-only chance); and for t >= 1
    how often the top-1 lies in the gold hop's scene and has its main object (the emblem's)."""
    import torch

    router.set_corpus(corpus)
    router.eval()
    router.refresh_index()
    # a scene of one world (several joined worlds reuse scene names)
    scene = lambda i: (router.scope(i),) + tuple(corpus.by_id[i].meta["scene"].values())  # noqa: E731
    sizes = {}
    for it in corpus.items:
        sizes[scene(it.id)] = sizes.get(scene(it.id), 0) + 1
    main = lambda i: tuple(corpus.by_id[i].meta["main"].values())  # noqa: E731
    hits, in_scene, has_main, named_scene = {"t0": [], "t1+": []}, [], [], []
    chance = {"t0": [], "t1+": []}
    states = [(q, t) for q in queries for t in range(len(q.chain))]
    with torch.no_grad():
        for s in range(0, len(states), 16):
            part = states[s:s + 16]
            embs = router.state_embeddings([q for q, _ in part], [q.chain[:t] for q, t in part])
            for (q, t), e in zip(part, embs):
                top = router.candidates(e, set(q.chain[:t]), k=1, scope=router.query_scope(q))
                key = "t0" if t == 0 else "t1+"
                hits[key].append(float(top[0] == q.chain[t]))
                chance[key].append(1.0 / (sizes[scene(q.chain[t])] - t))
                if not t:
                    named_scene.append(float(scene(top[0]) == scene(q.chain[0])))
                if t:
                    in_scene.append(float(scene(top[0]) == scene(q.chain[t])))
                    has_main.append(float(main(top[0]) == main(q.chain[t])))
    mean = lambda xs: sum(xs) / max(1, len(xs))  # noqa: E731
    return {f"acc/{k}": mean(v) for k, v in hits.items()} | {f"scene_chance/{k}": mean(v) for k, v in chance.items()} \
        | {f"n/{k}": len(v) for k, v in hits.items()} | {"top1_in_scene/t1+": mean(in_scene),
                                                          "top1_main/t1+": mean(has_main),
                                                          "top1_in_scene/t0": mean(named_scene)}


def summarise(dirs) -> str:
    """A markdown table of several probes' ``probe.json`` (held-out hop accuracy %, next to the scene-only chance)."""
    rows = ["| world (colours x shapes, scene cap, emblem, image px) | train worlds | train queries (images) | SFT "
            "steps, lr, batch, hard negatives, pooling | held-out hop-0 top-1 (text -> image) | hop-0 top-1 in the "
            "named scene | held-out hop>=1 top-1 | scene-only chance (hop-0 / hop>=1) | hop>=1 top-1 in gold scene | "
            "hop>=1 top-1 has the emblem's object | train-split hop>=1 top-1 |", "|---" * 11 + "|"]
    from omegaconf import OmegaConf

    pct = lambda x: f"{100 * x:.0f}"  # noqa: E731
    for d in dirs:
        r = json.loads((Path(d) / "probe.json").read_text())
        a, h, t = r["args"], r["held_out"], r["train"]
        hard = OmegaConf.load(Path(d) / "sft" / "config.yaml").sft.hard_negatives
        cells = [f"{a['colours']} x {a['shapes']}, {a['scene_cap']}, {a['emblem_scale']}, {a['size']}",
                 str(a.get("worlds", 0) or 1),
                 f"{r['queries']['train'] if 'queries' in r else a['n_train']} ({r['images']['train']})",
                 f"{a['steps']}, {a['lr']:g}, {a['batch_size']}, {hard}, {a['pooling']}",
                 pct(h["acc/t0"]),
                 pct(h["top1_in_scene/t0"]) if "top1_in_scene/t0" in h else "-", pct(h["acc/t1+"]),
                 f"{pct(h['scene_chance/t0'])} / {pct(h['scene_chance/t1+'])}", pct(h["top1_in_scene/t1+"]),
                 pct(h["top1_main/t1+"]), pct(t["acc/t1+"])]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out")
    p.add_argument("--summarise", nargs="+", metavar="OUT", help="print the table of these probes' probe.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--worlds", type=int, default=0,
                   help="train on this many other worlds (0: world seed's own train split)")
    p.add_argument("--n-train", type=int, default=150, help="training queries (per world with --worlds)")
    p.add_argument("--n-test", type=int, default=25)
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--shapes", type=int, default=5)
    p.add_argument("--colours", type=int, default=8)
    p.add_argument("--scene-cap", type=int, default=24)
    p.add_argument("--emblem-scale", type=float, default=0.28)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--pooling", default="last")
    p.add_argument("--hard-negatives", type=int, help="sft.hard_negatives (default: the config's)")
    p.add_argument("--index-refresh", type=int, help="train.index_refresh (default: the config's)")
    p.add_argument("--reuse", action="store_true", help="evaluate an existing --out (same flags) without training")
    a = p.parse_args(argv)
    if a.summarise:
        print(summarise(a.summarise))
        return
    if not a.out:
        p.error("--out is required")
    import torch

    torch.set_num_threads(1)
    from mmrl.data.synth_vhop import make_vhop_world
    from mmrl.retrieval.train_common import build_router, load_data
    from mmrl.retrieval.train_loop import run_stage
    from mmrl.retrieval.train_stages import load_stage_config
    from mmrl.retrieval.train_sft import SFTLoss

    out = Path(a.out)
    world = dict(size=a.size, shapes=a.shapes, colours=a.colours, scene_cap=a.scene_cap, emblem_scale=a.emblem_scale)
    if not a.reuse:
        make_vhop_world(str(out / "world"), 0 if a.worlds else a.n_train, a.n_test, seed=a.seed, **world)
        for k in range(1, a.worlds + 1):
            make_vhop_world(str(out / "worlds" / f"seed{a.seed + k}"), a.n_train, 0, seed=a.seed + k, **world)
    train = out / ("worlds/*/queries_train.json" if a.worlds else "world/queries_train.json")
    over = [f"data.train={train}", f"data.eval={out / 'world/queries_test.json'}",
            f"train.out_dir={out / 'sft'}", f"train.steps={a.steps}", f"train.save_every={a.steps}",
            f"train.seed={a.seed}", f"train.batch_size={a.batch_size}", f"train.lr={a.lr}",
            f"model.pooling={a.pooling}"] + (
        [f"sft.hard_negatives={a.hard_negatives}"] if a.hard_negatives is not None else []) + (
        [f"train.index_refresh={a.index_refresh}"] if a.index_refresh else [])
    cfg = load_stage_config("sft", [str(REPO / "configs/vhop_sft.yaml")], over)
    data = load_data(cfg, say=lambda *_: None)
    ev = (json.loads((out / "sft/final/eval.json").read_text()) if a.reuse
          else run_stage(cfg, SFTLoss(), overwrite=True, quiet=True, data=data))
    router = build_router(load_stage_config("sft", [str(out / "sft/config.yaml")], [f"train.init_from={out / 'sft'}"]),
                          data[0])
    seen = data[1][::max(1, len(data[1]) // 50)][:50] if a.worlds else data[1][:50]  # spread over the worlds
    res = {"args": vars(a), "images": {"train": len(data[0].items), "test": len(data[2][0].items)},
           "queries": {"train": len(data[1]), "test": len(data[2][1])},
           "held_out": hop_accuracy(router, *data[2]), "train": hop_accuracy(router, data[0], seen),
           "greedy_eval": ev}
    print(json.dumps(res, indent=1))
    (out / "probe.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
