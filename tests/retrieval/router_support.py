"""A hand-made VHOP corpus for router tests: coloured PNGs, chains of 1-3 hops, written in the VHOP JSON format."""
from pathlib import Path

import numpy as np
from PIL import Image

from mmrl.data.vhop_format import write_corpus, write_queries

COLOURS = [(220, 40, 40), (40, 200, 40), (40, 40, 220), (220, 220, 40), (200, 40, 200), (40, 200, 200),
           (128, 128, 128), (250, 140, 20), (90, 50, 20), (250, 250, 250)]


def make_router_world(root, n_images: int = 10, size: int = 56) -> Path:
    """``root/queries.json`` over ``root/corpus.json``: image i is a colour field with a small square of colour
    i+1 (the link to the next image); queries name a start colour and ask for chains of 1-3 hops."""
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    items = []
    for i in range(n_images):
        a = np.zeros((size, size, 3), np.uint8)
        a[:] = COLOURS[i % len(COLOURS)]
        a[4:16, 4:16] = COLOURS[(i + 1) % len(COLOURS)]
        Image.fromarray(a).save(root / "images" / f"im{i}.png")
        items.append({"id": f"im{i}", "image": f"images/im{i}.png"})
    write_corpus(str(root / "corpus.json"), "t", items)
    queries = []
    for n, (start, hops) in enumerate([(0, 1), (1, 2), (2, 3), (3, 2), (4, 1), (5, 3)]):
        chain = [f"im{(start + h) % n_images}" for h in range(hops)]
        queries.append({"id": f"q{n}", "query": f"start at the {start} red one", "kind": "exact", "level": hops,
                        "chain": chain})
    write_queries(str(root / "queries.json"), "corpus.json", queries)
    return root / "queries.json"
