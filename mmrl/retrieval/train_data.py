"""The router stages' data: ``data.train`` / ``data.eval`` name one VHOP query file, a glob pattern, or a list of
files and patterns (many worlds as one set: ``data.train='/worlds/*/queries_train.json'``). Every query file
brings its own corpus; several are joined by ``mmrl.data.vhop_union`` (each query's candidates and negatives stay
in its own corpus). Errors name the config key and the file; ``data.skip_bad`` skips and counts per file.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any, List, Optional, Tuple

from mmrl.errors import ConfigError

GLOB_CHARS = "*?["


def query_files(spec: Any, key: str) -> List[str]:
    """The query files ``spec`` names (a path or glob pattern, or a list of them), absolute, patterns sorted."""
    check_spec(spec, key)
    entries = [spec] if isinstance(spec, str) else list(spec)
    files = []
    for e in entries:
        if any(ch in e for ch in GLOB_CHARS):
            hits = sorted(h for h in glob.glob(e, recursive=True) if os.path.isfile(h))
            if not hits:
                raise ConfigError(f"config key '{key}': pattern {e!r} matches no file")
            files += hits
        elif os.path.isdir(e):
            raise ConfigError(f"config key '{key}': {e} is a directory; name its query files, e.g. "
                              f"'{os.path.join(e, '*', 'queries_train.json')}'")
        else:
            files.append(e)
    return [os.path.abspath(f) for f in files]


def check_spec(spec: Any, key: str) -> None:
    """Config-time check of the shape (files are read at load time)."""
    if isinstance(spec, str) and not spec:
        raise ConfigError(f"config key '{key}' is required")
    if not isinstance(spec, str) and not (isinstance(spec, (list, tuple)) and spec
                                          and all(isinstance(e, str) and e for e in spec)):
        raise ConfigError(f"config key '{key}': expected a query file, a glob pattern or a non-empty list of them, "
                          f"got {spec!r}")


def load_split(spec: Any, key: str, skip_bad: bool, say=print):
    """(corpus, queries) of every query file ``spec`` names, joined when there are several."""
    from mmrl.data.vhop_format import corpus_path, load_corpus, load_queries
    from mmrl.data.vhop_union import join_worlds
    from mmrl.errors import DataError

    loaded, corpora = [], {}
    for path in query_files(spec, key):
        if not os.path.isfile(path):
            raise ConfigError(f"config key '{key}': query file not found: {path}")
        try:
            with open(path) as f:
                rel = json.load(f).get("corpus")
            cpath = corpus_path(path, str(rel))
            if cpath not in corpora:
                corpora[cpath] = load_corpus(cpath, skip_bad=skip_bad)
            corpus = corpora[cpath]
            qs, skipped = load_queries(path, corpus, skip_bad=skip_bad)
        except (DataError, OSError, ValueError) as e:
            raise ConfigError(f"config key '{key}': {e}") from None
        if not qs:
            raise ConfigError(f"config key '{key}': {path} holds no usable query")
        if corpus.skipped or skipped:
            say(f"mmrl: {key}: {path}: skipped {len(corpus.skipped)} corpus images and {len(skipped)} queries "
                f"(data.skip_bad); first: {(corpus.skipped + skipped)[0][1]}")
        loaded.append((path, corpus, qs))
    try:
        corpus, queries = join_worlds(loaded)
    except DataError as e:
        raise ConfigError(f"config key '{key}': {e}") from None
    if len(loaded) > 1:
        say(f"mmrl: {key}: {len(queries)} queries from {len(loaded)} query files over {len(corpus.parts)} corpora "
            f"({len(corpus)} images)")
    return corpus, queries


def load_data(cfg, say=print) -> Tuple[object, list, Optional[Tuple[object, list]]]:
    """(train corpus, train queries, (eval corpus, eval queries) or None); skipped items are counted aloud."""
    corpus, train = load_split(cfg.data.train, "data.train", cfg.data.skip_bad, say)
    held = load_split(cfg.data.eval, "data.eval", cfg.data.skip_bad, say) if cfg.data.eval else None
    return corpus, train, held
