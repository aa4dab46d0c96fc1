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
    nframes = args.nframes if args.nframes is not None else clip_frames(sample)
    media = load_media(sample, MediaBudget(nframes=nframes, max_pixels=112 * 112))
    views = viewset.expand(sample, media, args.seed)
    make_contact_sheet(views, sample, args.out, candidates=viewset.candidates_for(sample))
    for v in views:
        print(f"{v.name:18s} role={v.role:10s} expected={v.expected}")
    print(f"wrote {args.out}")


def clip_frames(sample, cap: int = 16) -> int:
    """The default frame count of a preview: every frame of the sample's clip (an even number, as qwen-vl-utils
    samples frames in pairs), at most ``cap``; 4 for an image sample (unused there)."""
    import os

    if sample.video is None:
        return 4
    path = sample.video.path
    if os.path.isdir(path):
        total = sum(1 for f in os.listdir(path) if f.lower().endswith((".jpg", ".jpeg", ".png")))
    else:
        import decord

        try:
            total = len(decord.VideoReader(path, num_threads=1))
        except Exception as e:  # decord raises its own DECORDError and RuntimeError
            raise DataError(f"unreadable video ({type(e).__name__})", sample_id=sample.id, path=path) from None
    return max(2, min(cap, total) // 2 * 2)
