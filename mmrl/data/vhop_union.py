"""Many VHOP worlds as one training set: the corpora of several query files joined into one ``CorpusUnion``.

Each corpus becomes a *part* with key ``w0``, ``w1``, ... (in the order its first query file is given); its item ids
and the ids its queries name are prefixed ``"<key>/"`` (synthetic worlds all call their images ``train-00000``,
...), query ids too. A query keeps resolving its images in its own corpus, and whoever ranks candidates for it
(the router, hard negatives) restricts them to its part: ``part_of(query.chain[0])``. Query files that name the
same corpus file share one part. A single query file is returned as it is (its ``Corpus``, ids unchanged).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Sequence, Tuple

from mmrl.data.vhop_format import Corpus, CorpusItem, VhopQuery
from mmrl.errors import DataError

SEP = "/"


class CorpusUnion(Corpus):
    """A ``Corpus`` over several corpora (``parts``: key -> its ids, prefixed; ``sources``: key -> corpus file)."""

    def __init__(self, corpora: Sequence[Corpus]):
        items, skipped = [], []
        self.parts: Dict[str, List[str]] = {}
        self.sources: Dict[str, str] = {}
        for n, c in enumerate(corpora):
            key = f"w{n}"
            self.sources[key] = c.path
            self.parts[key] = [f"{key}{SEP}{it.id}" for it in c.items]
            items += [CorpusItem(f"{key}{SEP}{it.id}", it.image, dict(it.meta)) for it in c.items]
            skipped += [(f"{key}{SEP}{i}", why) for i, why in c.skipped]
        self._part = {i: k for k, ids in self.parts.items() for i in ids}
        super().__init__(name=f"union of {len(corpora)} corpora", path=f"{len(corpora)} corpora, first "
                         f"{corpora[0].path if corpora else '-'}", items=items, skipped=skipped)

    def part_of(self, item_id: str) -> str:
        """The key of the corpus ``item_id`` belongs to."""
        try:
            return self._part[item_id]
        except KeyError:
            raise KeyError(f"{item_id!r} is in none of the {len(self.parts)} joined corpora") from None


def join_worlds(loaded: Sequence[Tuple[str, Corpus, List[VhopQuery]]]) -> Tuple[Corpus, List[VhopQuery]]:
    """``loaded``: ``(query file, its corpus, its queries)`` per query file -> one corpus and all queries (ids
    prefixed by their corpus's part key). One query file: returned unchanged. A query file given twice, or two
    files giving the same query id over one corpus, is a ``DataError``."""
    if not loaded:
        raise DataError("no query file to join")
    files = [f for f, _, _ in loaded]
    twice = sorted({f for f in files if files.count(f) > 1})
    if twice:
        raise DataError("query file given more than once", path=twice[0])
    if len(loaded) == 1:
        return loaded[0][1], list(loaded[0][2])
    corpora: Dict[str, Corpus] = {}
    for _, c, _ in loaded:
        corpora.setdefault(c.path, c)
    union = CorpusUnion(list(corpora.values()))
    key = {src: k for k, src in union.sources.items()}
    out, seen = [], {}
    for f, c, qs in loaded:
        pre = key[c.path] + SEP
        for q in qs:
            qid = pre + q.id
            if qid in seen:
                raise DataError(f"query id {q.id!r} also comes from {seen[qid]} over the same corpus", sample_id=q.id,
                                path=f)
            seen[qid] = f
            out.append(replace(q, id=qid, chain=[pre + i for i in q.chain],
                               distractors=[pre + i for i in q.distractors],
                               dead_ends=[pre + i for i in q.dead_ends], meta={**q.meta, "source": f}))
    return union, out
