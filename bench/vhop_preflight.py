"""The pre-flight of the VHOP-Router miniature (issue 29 item 4) on the tiny base that sees (``model.path=base``,
``docs/base_model.md``): before any router stage, can the embedder read what the links need?

    .venv/bin/python bench/vhop_preflight.py [--seeds 0 1 2] [--sizes 56 112] [--train-worlds 6] [--n-train 50]
        [--n-test 100] [--pretrain-steps 0] [--pretrain-sizes PX ...] [--out runs/vhop_preflight] [--write docs/results/vhop.md]
        [--render-only] [--smoke]

Per protocol seed (``seed_plan``: its own worlds) and image size: ``--train-worlds`` VHOP worlds (the train split
of world seeds ``100 * world_seed + k``, ``--n-train`` queries each) and one held-out world (the test split of
``world_seed``, ``--n-test`` queries, a corpus of about 4.5 images per query), all with ``bench/vhop.py``'s world
(8 colours x 5 shapes, 24 images per scene, emblem plate 0.28 of the side). The embedder is
``Embedder.from_pretrained("base")`` (mean pooling, identity head: the router's start), frozen. Then:

1. **Attribute probes**: a multinomial logistic regression (``fit_probe``: standardised features, L2 ``--wd``,
   full-batch L-BFGS) per attribute on the train worlds' images, scored on the held-out world's images: the emblem
   (colour x shape, 40 classes, images that carry one), its colour, its shape, the main object (colour x shape) and
   the scene (colour x ground). Two frozen features: the embedder's output (what retrieval compares) and the vision
   tower's merged tokens concatenated in raster order (is the emblem in the tower at all?). Chance: the held-out
   share of its most frequent class (the best constant answer).
2. ``--pretrain-steps N``: the attribute heads of the issue's plan (``pretrain``: one linear head per attribute on
   the embedder's output, summed cross-entropy, AdamW lr ``--pretrain-lr``, batch 32) train the whole backbone for N steps
   on the train worlds' images, then the same probes and retrieval on the held-out world (``pretrained`` rows).
3. **Retrieval**: hop-1 top-1 of single-step retrieval (the query's text embedding -> the first gold image, over
   the held-out corpus) with chance 1 / corpus and the scene-only level (mean 1 / images in the named scene: a
   retriever that matches the scene but not the object); hop-2 top-1 (the state (query, first gold image) -> the
   second, queries of level >= 2) with its scene-only level 1 / (scene size - 1); and the same two hops by the
   output probes alone (``probe_hops``), what the frozen features could carry.

The router "can act" on a seed (``can_act``) when the embedder's emblem accuracy is above chance by two binomial
standard errors (``sqrt(c (1 - c) / n)`` at chance c, as ``_preflight.build_preflight``) AND hop-1 top-1 is above
the scene-only level by two standard errors. Each (seed, size, embedder) writes ``OUT/seed<S>/px<size>-<name>.json``;
``--write`` puts the table and the command at the top of the results file, the earlier content kept below.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from _protocol import MIN_SEEDS, ProtocolError, seed_plan  # noqa: E402
from vhop_preflight_table import ATTRS, above, binomial_se, render, write_results  # noqa: E402,F401

WORLD = dict(colours=8, shapes=5, scene_cap=24, emblem_scale=0.28)
FEATURES = ("output", "tokens")


def attribute_labels(meta: dict) -> Dict[str, str]:
    """The probed attributes of one corpus item's ``meta``; the emblem ones only when it carries an emblem."""
    out = {"main": f"{meta['main']['colour']} {meta['main']['shape']}",
           "scene": f"{meta['scene']['colour']} {meta['scene']['ground']}"}
    if meta.get("emblem"):
        e = meta["emblem"]
        out.update(emblem=f"{e['colour']} {e['shape']}", emblem_colour=e["colour"], emblem_shape=e["shape"])
    return out


# ---------------------------------------------------------------- probes (pure)
def fit_probe(x, y: Sequence[str], wd: float = 1e-3, iters: int = 100):
    """Multinomial logistic regression on standardised ``x`` ([N, D] tensor), labels ``y`` (strings): minimises
    ``mean CE + wd * ||W||^2`` with L-BFGS. Returns ``(classes, mean, std, W, b)``."""
    import torch

    classes = sorted(set(y))
    idx = {c: i for i, c in enumerate(classes)}
    t = torch.tensor([idx[v] for v in y])
    x = x.double()
    mu, sd = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mu) / sd
    w = torch.zeros(z.shape[1], len(classes), dtype=torch.double, requires_grad=True)
    b = torch.zeros(len(classes), dtype=torch.double, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=iters, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ w + b, t) + wd * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return classes, mu, sd, w.detach(), b.detach()


def probe_logp(probe, x):
    """``[N, classes]`` log-probabilities of ``probe`` on ``x``."""
    classes, mu, sd, w, b = probe
    return torch_log_softmax(((x.double() - mu) / sd) @ w + b)


def torch_log_softmax(z):
    import torch

    return torch.log_softmax(z, dim=1)


def predict_probe(probe, x) -> List[str]:
    return [probe[0][i] for i in probe_logp(probe, x).argmax(1).tolist()]


def constant_chance(y_test: Sequence[str]) -> float:
    """The best constant answer's accuracy on ``y_test``: the share of its most frequent label (an upper bound on
    what any answer that ignores the image scores)."""
    counts: Dict[str, int] = {}
    for v in y_test:
        counts[v] = counts.get(v, 0) + 1
    return max(counts.values()) / len(y_test)


def score_probe(x_train, y_train: Sequence[str], x_test, y_test: Sequence[str], wd: float = 1e-3,
                keep: Optional[dict] = None) -> Dict[str, float]:
    """Held-out accuracy of a probe trained on ``(x_train, y_train)``, with chance, n, classes and the binomial
    standard error at chance; the fitted probe goes to ``keep["probe"]`` when given."""
    if not len(y_test) or len(set(y_train)) < 2:
        raise ValueError(f"a probe needs >= 2 train classes and >= 1 test item, got {len(set(y_train))} and "
                         f"{len(y_test)}")
    probe = fit_probe(x_train, y_train, wd)
    if keep is not None:
        keep["probe"] = probe
    pred = predict_probe(probe, x_test)
    acc = sum(p == t for p, t in zip(pred, y_test)) / len(y_test)
    c = constant_chance(y_test)
    return {"acc": acc, "chance": c, "n": len(y_test), "classes": len(set(y_train)), "se": binomial_se(c, len(y_test))}


def can_act(row: dict) -> Tuple[bool, str]:
    """The router's mechanism can act when the embedder reads the emblem (emblem probe on its output above chance by
    2 s.e.) and single-step retrieval finds the described image (hop-1 top-1 above the scene-only level by 2 s.e.)."""
    e, h = row["probes"]["output"]["emblem"], row["retrieval"]
    why = []
    if not above(e["acc"], e["chance"], e["n"]):
        why.append(f"emblem accuracy {100 * e['acc']:.1f}% is not above chance {100 * e['chance']:.1f}% by 2 s.e. "
                   f"(n={e['n']})")
    if not above(h["hop1"], h["hop1_scene_only"], h["n_hop1"]):
        why.append(f"hop-1 top-1 {100 * h['hop1']:.1f}% is not above the scene-only level "
                   f"{100 * h['hop1_scene_only']:.1f}% by 2 s.e. (n={h['n_hop1']})")
    return (not why, "; ".join(why) or "emblem read and hop-1 above the scene-only level")


# ---------------------------------------------------------------- retrieval (pure given embeddings)
def scene_key(meta: dict) -> Tuple[str, str]:
    return meta["scene"]["colour"], meta["scene"]["ground"]


def top1_hits(q_emb, img_emb, gold: Sequence[int], exclude: Sequence[Sequence[int]] = ()) -> List[float]:
    """1.0 where the nearest image (dot product) of each query row is its gold index; ``exclude[i]`` are left out."""
    import torch

    s = q_emb @ img_emb.T
    for i, ex in enumerate(exclude):
        for j in ex:
            s[i, j] = -float("inf")
    top = s.argmax(1).tolist()
    return [float(t == g) for t, g in zip(top, gold)]


def probe_hops(logp: Dict[str, Tuple[List[str], object]], corpus, queries) -> Dict[str, float]:
    """Retrieval by the attribute probes alone (what the frozen features carry, given a reader that parses the
    query exactly): hop 1 ranks every image by ``log p(main) + log p(scene)`` of the described start; hop 2 reads
    the first gold image's emblem and scene (probe argmax) and ranks the other images by ``log p(main = emblem) +
    log p(scene)``. ``logp[attr] = (classes, [N, C] log-probs over corpus)``."""
    pos = {it.id: i for i, it in enumerate(corpus.items)}
    n = len(corpus.items)

    def col(attr: str, label: str):
        classes, lp = logp[attr]
        return lp[:, classes.index(label)] if label in classes else lp.new_full((n,), -1e9)

    h1, h2 = [], []
    for q in queries:
        lab = attribute_labels(q.meta["start"])
        h1.append(float(int((col("main", lab["main"]) + col("scene", lab["scene"])).argmax()) == pos[q.chain[0]]))
        if len(q.chain) >= 2:
            i0 = pos[q.chain[0]]
            emblem = logp["emblem"][0][int(logp["emblem"][1][i0].argmax())]
            scene = logp["scene"][0][int(logp["scene"][1][i0].argmax())]
            s = col("main", emblem) + col("scene", scene)
            s[i0] = -float("inf")
            h2.append(float(int(s.argmax()) == pos[q.chain[1]]))
    return {"probe_hop1": sum(h1) / len(h1), "probe_hop2": sum(h2) / max(1, len(h2))}


# ---------------------------------------------------------------- the model side
def load_world_images(path: str, split: str):
    from mmrl.data.vhop_format import load_corpus, load_queries

    corpus = load_corpus(str(Path(path) / f"corpus_{split}.json"))
    queries = load_queries(str(Path(path) / f"queries_{split}.json"), corpus)[0]
    return corpus, queries


def extract(emb, corpus, batch: int = 32):
    """``(output [N, dim], tokens [N, T * H])``: the embedder's unit vectors and the vision tower's merged tokens
    (raster order, concatenated) of every corpus image, each encoded alone."""
    import torch

    grabbed = []
    hook = emb._backbone().visual.register_forward_hook(lambda m, i, o: grabbed.append(o.pooler_output.detach()))
    try:
        outs = []
        with torch.no_grad():
            for s in range(0, len(corpus.items), batch):
                ims = [corpus.image(it.id) for it in corpus.items[s:s + batch]]
                outs.append(emb.embed_images(ims, batch_size=batch))
    finally:
        hook.remove()
    toks = torch.cat(grabbed)
    return torch.cat(outs), toks.reshape(len(corpus.items), -1)


def probe_all(train: List[Tuple], test: Tuple, wd: float, keep: Optional[dict] = None) -> Dict[str, Dict[str, dict]]:
    """Per feature and attribute: ``score_probe`` from the train worlds' ``(corpus, output, tokens)`` to the held-out
    world's; ``keep[attr]`` gets the output feature's probes."""
    import torch

    out: Dict[str, Dict[str, dict]] = {}
    for fi, feat in enumerate(FEATURES):
        out[feat] = {}
        for attr in ATTRS:
            def split(worlds):
                xs, ys = [], []
                for corpus, *feats in worlds:
                    for i, it in enumerate(corpus.items):
                        lab = attribute_labels(it.meta).get(attr)
                        if lab is not None:
                            xs.append(feats[fi][i])
                            ys.append(lab)
                return torch.stack(xs), ys
            (xa, ya), (xb, yb) = split(train), split([test])
            box: dict = {}
            out[feat][attr] = score_probe(xa, ya, xb, yb, wd, box)
            if keep is not None and feat == "output":
                keep[attr] = box["probe"]
    return out


def retrieval(emb, corpus, queries, img_emb) -> dict:
    """Hop-1 and hop-2 top-1 over ``corpus`` with chance and scene-only levels."""
    import torch

    pos = {it.id: i for i, it in enumerate(corpus.items)}
    sizes: Dict[Tuple[str, str], int] = {}
    for it in corpus.items:
        sizes[scene_key(it.meta)] = sizes.get(scene_key(it.meta), 0) + 1
    size_of = lambda iid: sizes[scene_key(corpus.by_id[iid].meta)]  # noqa: E731
    with torch.no_grad():
        q1 = torch.cat([emb.embed_texts([q.query for q in queries[s:s + 32]]) for s in range(0, len(queries), 32)])
        two = [q for q in queries if len(q.chain) >= 2]
        q2 = torch.cat([emb.embed_states([(q.query, [corpus.image(q.chain[0])]) for q in two[s:s + 32]])
                        for s in range(0, len(two), 32)])
    h1 = top1_hits(q1, img_emb, [pos[q.chain[0]] for q in queries])
    h2 = top1_hits(q2, img_emb, [pos[q.chain[1]] for q in two], [[pos[q.chain[0]]] for q in two])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {"hop1": mean(h1), "n_hop1": len(h1), "hop1_chance": 1 / len(corpus.items),
            "hop1_scene_only": mean([1 / size_of(q.chain[0]) for q in queries]),
            "hop2": mean(h2), "n_hop2": len(h2),
            "hop2_scene_only": mean([1 / (size_of(q.chain[1]) - 1) for q in two])}


def pretrain(emb, worlds: List, steps: int, lr: float, seed: int, batch: int = 32) -> List[float]:
    """The issue's attribute-head pre-training: linear heads (emblem with a ``none`` class, main object, scene) on
    ``sqrt(dim)`` x the embedder's unit output, summed cross-entropy, AdamW over the whole backbone and the heads;
    ``steps`` batches drawn with ``seed`` from the train worlds' images. Returns the loss per step."""
    import random

    import torch

    items = [(corpus, it) for corpus, *_ in worlds for it in corpus.items]
    labels = {"emblem": [attribute_labels(it.meta).get("emblem", "none") for _, it in items],
              "main": [attribute_labels(it.meta)["main"] for _, it in items],
              "scene": [attribute_labels(it.meta)["scene"] for _, it in items]}
    idx = {k: {c: i for i, c in enumerate(sorted(set(v)))} for k, v in labels.items()}
    heads = torch.nn.ModuleDict({k: torch.nn.Linear(emb.dim, len(v)) for k, v in idx.items()})
    opt = torch.optim.AdamW(list(emb.parameters()) + list(heads.parameters()), lr=lr, weight_decay=0.0)
    rng, losses = random.Random(seed), []
    emb.train()
    for _ in range(steps):
        pick = rng.sample(range(len(items)), min(batch, len(items)))
        e = emb.embed_images([c.image(it.id) for c, it in (items[i] for i in pick)], batch_size=batch)
        e = e * math.sqrt(emb.dim)
        loss = sum(torch.nn.functional.cross_entropy(heads[k](e), torch.tensor([idx[k][labels[k][i]] for i in pick]))
                   for k in heads)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    emb.eval()
    return losses


def run_seed(seed: int, size: int, a, out: Path) -> List[dict]:
    """One protocol seed at one image size: worlds, base features, probes, retrieval (and the pre-trained
    embedder with ``--pretrain-steps``). Writes and returns one row per embedder."""
    import torch

    from mmrl.data.synth_vhop import make_vhop_world
    from mmrl.retrieval.embedder import Embedder

    torch.manual_seed(seed_plan(seed).sft_seed)
    ws = seed_plan(seed).world_seed
    wdir = out / f"seed{seed}" / f"worlds{size}"
    make_vhop_world(str(wdir / "heldout"), 0, a.n_test, seed=ws, size=size, **WORLD)
    for k in range(1, a.train_worlds + 1):
        make_vhop_world(str(wdir / f"train{k}"), a.n_train, 0, seed=100 * ws + k, size=size, **WORLD)
    train_c = [load_world_images(str(wdir / f"train{k}"), "train")[0] for k in range(1, a.train_worlds + 1)]
    test_c, test_q = load_world_images(str(wdir / "heldout"), "test")
    emb = Embedder.from_pretrained("base").eval()
    rows = []
    pre = a.pretrain_steps and (not a.pretrain_sizes or size in a.pretrain_sizes)
    for name in ("base",) + (("pretrained",) if pre else ()):
        t0, c0, losses = time.time(), time.process_time(), []
        if name == "pretrained":
            losses = pretrain(emb, [(c,) for c in train_c], a.pretrain_steps, a.pretrain_lr, seed_plan(seed).sft_seed)
        train = [(c,) + extract(emb, c) for c in train_c]
        test = (test_c,) + extract(emb, test_c)
        kept: dict = {}
        row = {"seed": seed, "size": size, "embedder": name, "world_seed": ws,
               "images": {"train": sum(len(c.items) for c in train_c), "test": len(test_c.items)},
               "queries_test": len(test_q), "probes": probe_all(train, test, a.wd, kept),
               "retrieval": retrieval(emb, test_c, test_q, test[1]),
               "pretrain": {"steps": a.pretrain_steps, "lr": a.pretrain_lr, "loss_first": losses[:10],
                            "loss_last": losses[-10:]} if losses else None}
        row["retrieval"].update(probe_hops({k: (kept[k][0], probe_logp(kept[k], test[1])) for k in
                                            ("main", "scene", "emblem")}, test_c, test_q))
        row["can_act"], row["reason"] = can_act(row)
        row["cpu_s"], row["wall_s"] = time.process_time() - c0, time.time() - t0
        (out / f"seed{seed}").mkdir(parents=True, exist_ok=True)
        (out / f"seed{seed}" / f"px{size}-{name}.json").write_text(json.dumps(row, indent=1))
        print(f"seed {seed} {size}px {name}: emblem {row['probes']['output']['emblem']['acc']:.3f} vs "
              f"{row['probes']['output']['emblem']['chance']:.3f}, hop-1 {row['retrieval']['hop1']:.3f} vs scene-only "
              f"{row['retrieval']['hop1_scene_only']:.3f}, can act {row['can_act']} ({row['cpu_s']:.0f} CPU s)",
              flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--sizes", type=int, nargs="+", default=[56, 112])
    p.add_argument("--train-worlds", type=int, default=6)
    p.add_argument("--n-train", type=int, default=50, help="queries per train world")
    p.add_argument("--n-test", type=int, default=100, help="queries of the held-out world")
    p.add_argument("--wd", type=float, default=1e-3, help="the probes' L2 weight")
    p.add_argument("--pretrain-steps", type=int, default=0)
    p.add_argument("--pretrain-lr", type=float, default=3e-4)
    p.add_argument("--pretrain-sizes", type=int, nargs="*", help="pre-train only at these sizes (default: all)")
    p.add_argument("--out", default="runs/vhop_preflight")
    p.add_argument("--write", help="results file to put the table at the top of (e.g. docs/results/vhop.md)")
    p.add_argument("--render-only", action="store_true", help="render the saved rows of --out")
    p.add_argument("--smoke", action="store_true", help="allow < 3 seeds (labelled SMOKE RUN)")
    a = p.parse_args(argv)
    if len(a.seeds) < MIN_SEEDS and not a.smoke:
        raise ProtocolError(f"protocol: {len(a.seeds)} seed(s); the pre-flight needs >= {MIN_SEEDS} (--smoke to try)")
    out = Path(a.out)
    command = "OMP_NUM_THREADS=1 .venv/bin/python bench/vhop_preflight.py " + " ".join(
        x for x in (argv if argv is not None else sys.argv[1:]) if x != "--render-only")
    if not a.render_only:
        import torch

        torch.set_num_threads(1)
        for size in a.sizes:  # every seed of a size before the next size
            for s in a.seeds:
                run_seed(s, size, a, out)
    rows = [json.loads(f.read_text()) for s in a.seeds for f in sorted((out / f"seed{s}").glob("px*.json"))
            if json.loads(f.read_text())["size"] in a.sizes]
    section = render(rows, command, smoke=a.smoke)
    print("\n".join(section))
    if a.write:
        write_results(Path(a.write), section)


if __name__ == "__main__":
    main()
