"""VHOP corpora and queries on disk: a JSON format for multi-hop visual retrieval that real data can use too.

Corpus file (``corpus_<split>.json``)::

    {"format": "mmrl-vhop-corpus", "version": 1, "name": "train",
     "items": [{"id": "train-0000", "image": "images/train-0000.png", "meta": {...}}, ...]}

Query file (``queries_<split>.json``)::

    {"format": "mmrl-vhop-queries", "version": 1, "corpus": "corpus_train.json",
     "queries": [{"id": "train-q0000", "query": "Start at the red circle in the navy scene ...",
                  "kind": "exact", "level": 3, "chain": ["train-0003", "train-0007", "train-0011"],
                  "distractors": ["train-0012"], "dead_ends": ["train-0013"], "meta": {...}}, ...]}

``image`` paths are relative to the file's folder (absolute paths are accepted). ``chain`` is the gold chain in
hop order: the first id is the image the query describes, the last the target; ``hops == len(chain)`` (one
retrieved image per hop). ``level`` is the difficulty level (the synthetic world uses ``level == hops``; real
data may differ). ``distractors`` look like a hop of the chain but lead nowhere; ``dead_ends`` are images from
which no link continues. ``kind`` is ``exact`` or ``fuzzy``; ``meta`` is free.

``load_corpus`` opens every image (``PIL`` ``load``) and names the missing or corrupt ones; with ``skip_bad=True``
they are left out and listed in ``Corpus.skipped``. ``load_queries`` checks every id against the corpus; a query
that names a missing (or skipped) image raises, or is skipped and counted with ``skip_bad=True``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from mmrl.errors import DataError

CORPUS_FORMAT, QUERIES_FORMAT, VERSION = "mmrl-vhop-corpus", "mmrl-vhop-queries", 1
QUERY_KINDS = ("exact", "fuzzy")


@dataclass
class CorpusItem:
    id: str
    image: str  # absolute path
    meta: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Corpus:
    name: str
    path: str  # the corpus file (absolute)
    items: List[CorpusItem]
    skipped: List[Tuple[str, str]] = field(default_factory=list)  # (item id, reason) left out with skip_bad

    def __post_init__(self):
        self.by_id: Dict[str, CorpusItem] = {it.id: it for it in self.items}

    @property
    def ids(self) -> List[str]:
        return [it.id for it in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item_id: str) -> bool:
        return item_id in self.by_id

    def image(self, item_id: str):
        """The item's image as an RGB ``PIL.Image``."""
        from PIL import Image

        with Image.open(self.by_id[item_id].image) as im:
            return im.convert("RGB")


@dataclass
class VhopQuery:
    id: str
    query: str
    kind: str  # exact | fuzzy
    level: int
    chain: List[str]  # gold chain, hop order; chain[-1] is the target
    distractors: List[str] = field(default_factory=list)
    dead_ends: List[str] = field(default_factory=list)
    meta: Dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return self.chain[-1]

    @property
    def hops(self) -> int:
        return len(self.chain)


def _read(path: str, fmt: str) -> dict:
    if not os.path.isfile(path):
        raise DataError("file not found", path=path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"invalid JSON: {e}", path=path) from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise DataError(f"not a {fmt} file: expected an object with \"format\": \"{fmt}\"", path=path)
    if data.get("version") != VERSION:
        raise DataError(f"unsupported version {data.get('version')!r}; this mmrl reads version {VERSION}", path=path)
    return data


def _check_image(path: str) -> Optional[str]:
    """``None`` if ``path`` is an image PIL can decode whole, else the reason."""
    from PIL import Image

    if not os.path.isfile(path):
        return f"image file not found: {path}"
    try:
        with Image.open(path) as im:
            im.load()
    except Exception as e:  # truncated or not an image at all
        return f"corrupt image {path}: {type(e).__name__}: {str(e)[:120]}"
    return None


def load_corpus(path: str, skip_bad: bool = False, check_images: bool = True) -> Corpus:
    """Read a corpus file; every image is opened unless ``check_images=False``. A bad item raises ``DataError``
    naming the file, the item and the image; with ``skip_bad=True`` it is left out and listed in ``skipped``."""
    path = os.path.abspath(path)
    data = _read(path, CORPUS_FORMAT)
    raw = data.get("items")
    if not isinstance(raw, list):
        raise DataError("key 'items': expected a list", path=path)
    root = os.path.dirname(path)
    items, skipped, seen = [], [], set()
    for i, it in enumerate(raw):
        iid = it.get("id") if isinstance(it, dict) else None
        name = str(iid) if iid is not None else f"items[{i}]"
        if not isinstance(it, dict) or not isinstance(iid, str) or not iid:
            reason = f"items[{i}]: expected an object with a non-empty string 'id'"
        elif iid in seen:
            reason = f"items[{i}]: duplicate id {iid!r}"
        elif not isinstance(it.get("image"), str) or not it["image"]:
            reason = f"items[{i}] ({iid}): expected a non-empty 'image' path"
        elif not isinstance(it.get("meta", {}), dict):
            reason = f"items[{i}] ({iid}): 'meta' must be an object"
        else:
            img = os.path.normpath(os.path.join(root, it["image"]))
            bad = _check_image(img) if check_images else None
            reason = f"items[{i}] ({iid}): {bad}" if bad else None
        if reason is not None:
            if not skip_bad:
                raise DataError(reason, sample_id=name, path=path)
            skipped.append((name, reason))
            continue
        seen.add(iid)
        items.append(CorpusItem(iid, img, dict(it.get("meta", {}))))
    return Corpus(name=str(data.get("name", os.path.basename(path))), path=path, items=items, skipped=skipped)


def _ids(q: dict, key: str, required: bool) -> List[str]:
    v = q.get(key, None if required else [])
    if not isinstance(v, list) or (required and not v) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"'{key}' must be a {'non-empty ' if required else ''}list of item ids")
    return list(v)


def _query(q: Any, corpus: Optional[Corpus]) -> VhopQuery:
    if not isinstance(q, dict):
        raise ValueError("expected an object")
    if not isinstance(q.get("id"), str) or not q["id"]:
        raise ValueError("'id' must be a non-empty string")
    if not isinstance(q.get("query"), str) or not q["query"].strip():
        raise ValueError("'query' must be a non-empty string")
    if q.get("kind", "exact") not in QUERY_KINDS:
        raise ValueError(f"'kind' must be one of {', '.join(QUERY_KINDS)}, got {q.get('kind')!r}")
    level = q.get("level")
    if isinstance(level, bool) or not isinstance(level, int) or level < 1:
        raise ValueError(f"'level' must be an integer >= 1, got {level!r}")
    out = VhopQuery(q["id"], q["query"], q.get("kind", "exact"), level, _ids(q, "chain", True),
                    _ids(q, "distractors", False), _ids(q, "dead_ends", False), dict(q.get("meta") or {}))
    if len(set(out.chain)) != len(out.chain):
        raise ValueError(f"'chain' repeats an id: {out.chain}")
    if corpus is not None:
        for key in ("chain", "distractors", "dead_ends"):
            for iid in getattr(out, key):
                if iid not in corpus:
                    why = " (skipped as bad)" if any(s == iid for s, _ in corpus.skipped) else ""
                    raise ValueError(f"'{key}' names {iid!r}, which is not in corpus {corpus.path}{why}")
    return out


def load_queries(path: str, corpus: Optional[Corpus] = None, skip_bad: bool = False,
                 ) -> Tuple[List[VhopQuery], List[Tuple[str, str]]]:
    """Read a query file; ``corpus`` (default: the file's ``corpus`` loaded with the same ``skip_bad``) checks
    every id. Returns the queries and the ``(query id, reason)`` pairs skipped with ``skip_bad=True``."""
    path = os.path.abspath(path)
    data = _read(path, QUERIES_FORMAT)
    if corpus is None:
        if not isinstance(data.get("corpus"), str):
            raise DataError("key 'corpus': expected the corpus file's path", path=path)
        corpus = load_corpus(corpus_path(path, data["corpus"]), skip_bad=skip_bad)
    raw = data.get("queries")
    if not isinstance(raw, list):
        raise DataError("key 'queries': expected a list", path=path)
    queries, skipped, seen = [], [], set()
    for i, q in enumerate(raw):
        name = q.get("id") if isinstance(q, dict) and isinstance(q.get("id"), str) else f"queries[{i}]"
        try:
            if name in seen:
                raise ValueError(f"duplicate id {name!r}")
            queries.append(_query(q, corpus))
            seen.add(name)
        except ValueError as e:
            reason = f"queries[{i}]: {e}"
            if not skip_bad:
                raise DataError(reason, sample_id=name, path=path) from None
            skipped.append((name, reason))
    return queries, skipped


def corpus_path(queries_file: str, rel: str) -> str:
    """The corpus a query file names, resolved against the query file's folder."""
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(queries_file)), rel))


def write_corpus(path: str, name: str, items: List[dict]) -> str:
    """Write ``items`` (``{"id", "image" (relative to the file's folder), "meta"}``) as a corpus file."""
    return _write(path, {"format": CORPUS_FORMAT, "version": VERSION, "name": name, "items": items})


def write_queries(path: str, corpus_rel: str, queries: List[dict]) -> str:
    """Write ``queries`` (dicts with the keys of the format above) naming corpus file ``corpus_rel``."""
    return _write(path, {"format": QUERIES_FORMAT, "version": VERSION, "corpus": corpus_rel, "queries": queries})


def _write(path: str, data: dict) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    return path


def query_samples(queries_file: str, skip_bad: bool = False):
    """The queries of a query file as ``Sample`` objects for retrieval episodes: ``question`` is the query text,
    ``answer`` the target's ``meta["answer"]`` (free text) or else its id, and ``meta`` holds ``corpus`` (the corpus
    file, absolute: what ``visual_retrieve`` searches) and ``vhop`` (level, kind, chain, distractors, dead ends).
    Returns the samples and the skipped ``(query id, reason)`` pairs (corpus images and queries)."""
    from mmrl.data.schema import Sample

    queries_file = os.path.abspath(queries_file)
    rel = _read(queries_file, QUERIES_FORMAT).get("corpus")
    if not isinstance(rel, str):
        raise DataError("key 'corpus': expected the corpus file's path", path=queries_file)
    corpus = load_corpus(corpus_path(queries_file, rel), skip_bad=skip_bad)
    queries, skipped = load_queries(queries_file, corpus, skip_bad=skip_bad)
    samples = [Sample(id=q.id, question=q.query, candidates=[], answer=str(q.meta.get("answer", q.target)),
                      qtype=f"vhop_L{q.level}", answer_type="text",
                      meta={"corpus": corpus.path, "vhop": {"level": q.level, "kind": q.kind, "chain": q.chain,
                                                            "distractors": q.distractors, "dead_ends": q.dead_ends}})
               for q in queries]
    return samples, corpus.skipped + skipped
