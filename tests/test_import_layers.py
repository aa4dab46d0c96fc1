"""The import graph of mmrl/ and bench/: no circle, and every layer imports only downward.

Layers (a module may import, at module level or inside a function, only modules of its own layer or below):

    0  errors, registry, dist, data, media, models, advice, loss_params
    1  views, rewards, algos, retrieval (embedder, index, router, retriever backends' interface)
    2  tools (registry, suite, calls, the built-in tools, metrics); rectified bootstrapping's pipeline sits at 5
    3  rollout (engines, loops), config (asks the loops' capabilities)
    4  stream
    5  train, eval, diagnose; router training and loading a trained router (retrieval.train_*, router_*)
    6  cli, cli_run, cli_synth, demo, validate, reference, __main__
    7  bench/ (scripts; they import one another by bare name)

A registry names the modules of its built-ins as strings (``mmrl.registry``); those are not import edges.
A circle is a set of files that import one another (a strongly connected component of the file graph, imports
inside functions included); each one left is listed in ``KNOWN_CIRCLES`` with why, and a listed one that is gone
fails too, so that its entry is removed.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {
    0: {"errors", "registry", "dist", "environment", "data", "media", "models", "advice", "loss_params", "__init__"},
    1: {"views", "rewards", "algos", "retrieval"},
    2: {"tools"},
    3: {"rollout", "config"},
    4: {"stream"},
    5: {"train", "eval", "diagnose"},
    6: {"cli", "cli_run", "cli_synth", "demo", "__main__", "validate", "reference"},
}
# modules above the rest of their package (the longest matching prefix wins)
MODULE_LAYERS = {
    "tools.evaluate": 3, "tools.turn_sft": 3, "tools.preview_cli": 3,  # they drive the rollout loop
    "tools.trajectory_log": 3,  # the step's log of tool trajectories, scored as tools.evaluate scores them
    "tools.rectify_pipeline": 5, "tools.rectify_select": 5,  # rectified bootstrapping: RL, rectify, SFT, RL
    "retrieval.train_common": 5, "retrieval.train_data": 5, "retrieval.train_stages": 5, "retrieval.train_sft": 5,
    "retrieval.train_imitate": 5, "retrieval.train_rl": 5, "retrieval.train_loop": 5, "retrieval.router_cli": 5,
    "retrieval.router_backend": 5,  # loads a trained router (its stage config): reached through RETRIEVERS by name
}
BENCH_LAYER = 7
KNOWN_CIRCLES: list = []  # a circle that must stay for a while is listed here, with why
LAYER_OF = {name: k for k, names in LAYERS.items() for name in names}


def _files():
    out = {}
    for pkg in ("mmrl", "bench"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


FILES = _files()


def _resolve(name: str):
    while name and name not in FILES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mod: str, path: Path):
    """``(line, imported module)`` of every import in ``path`` that names a file of mmrl/ or bench/."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if mod.startswith("bench.") and f"bench.{module}" in FILES:  # a bench script's sibling, by bare name
                module = f"bench.{module}"
            candidates = [f"{module}.{a.name}" for a in node.names] + [module]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
            if mod.startswith("bench."):
                candidates += [f"bench.{a.name}" for a in node.names]
        else:
            continue
        for c in candidates:
            target = _resolve(c)
            if target and target != mod:
                yield node.lineno, target
                if isinstance(node, ast.ImportFrom):
                    break


GRAPH = {mod: {t for _, t in _imports(mod, path)} for mod, path in FILES.items()}


def layer(mod: str) -> int:
    if mod.startswith("bench"):
        return BENCH_LAYER
    rel = mod.split(".", 1)[1] if "." in mod else "__init__"
    for key in sorted(MODULE_LAYERS, key=len, reverse=True):
        if rel == key or rel.startswith(key + "."):
            return MODULE_LAYERS[key]
    top = rel.split(".")[0]
    assert top in LAYER_OF, f"mmrl/{top} is in no layer: add it to LAYERS in {__file__}"
    return LAYER_OF[top]


def circles(graph):
    """The strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def test_no_import_circle():
    found = circles(GRAPH)
    new = [sorted(c) for c in found if c not in KNOWN_CIRCLES]
    gone = [sorted(c) for c in KNOWN_CIRCLES if c not in found]
    assert not new, "import circles (files that import one another):\n" + "\n".join(map(str, new))
    assert not gone, f"KNOWN_CIRCLES entries that are no circle any more (remove them): {gone}"


def test_every_layer_imports_only_downward():
    bad = []
    for mod, path in FILES.items():
        for line, target in _imports(mod, path):
            if layer(target) > layer(mod):
                bad.append(f"{path.relative_to(ROOT)}:{line} (layer {layer(mod)}) imports {target} "
                           f"(layer {layer(target)})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_checks_catch_a_circle_and_an_upward_import():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": set()}) == []
    assert layer("mmrl.views.transforms") < layer("mmrl.rollout.agent_loop") < layer("mmrl.stream.loop")
    assert layer("mmrl.retrieval.router") == 1 and layer("mmrl.retrieval.train_loop") == 5
    assert "mmrl.views.image_transforms" in GRAPH["mmrl.views.region_transforms"]
    assert "bench.bpo_table" in GRAPH["bench.bpo_pool"]  # bench scripts' bare-name imports are edges
