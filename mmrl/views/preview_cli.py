"""``mmrl views preview``: decode one sample, expand its views and write the contact sheet PNG."""
from __future__ import annotations

from mmrl.data.annotations import load_samples
from mmrl.errors import DataError
from mmrl.media.decode import MediaBudget, load_media
from mmrl.views.preview import make_contact_sheet
from mmrl.views.viewset import ViewSet


def preview_main(args) -> None:
    viewset = ViewSet.load(args.viewset)
    samples, _ = load_samples(args.data)
    by_id = {s.id: s for s in samples}
    if args.sample not in by_id:
        raise DataError(f"no sample with this id in {args.data} ({len(by_id)} samples)", sample_id=args.sample)
    sample = by_id[args.sample]
    media = load_media(sample, MediaBudget(nframes=args.nframes, max_pixels=112 * 112))
    views = viewset.expand(sample, media, args.seed)
    make_contact_sheet(views, sample, args.out, candidates=viewset.candidates_for(sample))
    for v in views:
        print(f"{v.name:18s} role={v.role:10s} expected={v.expected}")
    print(f"wrote {args.out}")
