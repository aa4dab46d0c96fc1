"""``mmrl data synth``: the synthetic worlds' builders behind one command, their flags and the checks of which
flag applies to which ``--kind`` (a flag another kind reads is refused in one line)."""
from __future__ import annotations

import argparse
import json

from mmrl.data.seek_script import SEEK_STYLES  # a tuple of names (no torch)
from mmrl.errors import ConfigError

_SYNTH_FLAGS = {"size": "--size", "n_frames": "--frames", "fps": "--fps", "prior_strength": "--prior-strength",
                "duration": "--duration", "n_val": "--n-val"}


def _synth_image(args):
    from mmrl.data.synth_image import make_image_world

    return make_image_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size)


def _synth_claims(args):
    from mmrl.data.synth_claims import make_claims_world

    return make_claims_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size,
                             unsupported_source=args.unsupported_source or "random")


def _synth_mood(args):
    from mmrl.data.synth_mood import make_mood_world

    return make_mood_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size)


def _synth_seek(args):
    from mmrl.data.synth_seek import make_seek_world

    return make_seek_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size, fps=args.fps,
                           teacher_seek=args.teacher_seek or "whole", time_in_question=args.time_in_question,
                           fixed_options=args.fixed_options, n_val=args.n_val or 0)


def _synth_stream(args):
    from mmrl.stream.dataset import make_stream_dataset

    return make_stream_dataset(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size,
                               duration=args.duration, fps=args.fps)


def _synth_vhop(args):
    from mmrl.data.synth_vhop import make_vhop_world

    return make_vhop_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size)


# flags that only some kinds read: (attribute, flag, kinds); any other kind refuses them
_KIND_FLAGS = (("prior", "--prior", ("video",)), ("fixed_options", "--fixed-options", ("video", "seek")),
               ("unsupported_source", "--unsupported-source", ("claims",)),
               ("teacher_seek", "--teacher-seek", ("seek",)), ("time_in_question", "--time-in-question", ("seek",)),
               ("n_val", "--n-val", ("seek",)), ("duration", "--duration", ("stream",)))


def _check_kind_flags(args) -> None:
    for attr, flag, kinds in _KIND_FLAGS:
        value = getattr(args, attr)
        if value is not None and value is not False and args.kind not in kinds:  # 0 is a value given
            raise ConfigError(f"data synth: {flag} applies to --kind {' or '.join(kinds)} only, not {args.kind}"
                              + (" (claims: options always fixed)" if attr == "fixed_options" else ""))


# the image-like worlds (one builder each); video is built above with its frame checks
_SYNTH_KINDS = {"image": _synth_image, "claims": _synth_claims, "mood": _synth_mood, "seek": _synth_seek,
                "stream": _synth_stream, "vhop": _synth_vhop}


# default (n_train, n_test) per kind where 512/128 does not fit the world: a VHOP split holds 32 scenes x 40 objects
# = 1280 images, about 4.5 per query at the default distractors (512 queries run out of slots; 200 fit)
_COUNTS = {None: (512, 128), "vhop": (200, 50)}


def cmd_synth(args) -> None:
    n_train, n_test = _COUNTS.get(args.kind, _COUNTS[None])
    args.n_train = n_train if args.n_train is None else args.n_train
    args.n_test = n_test if args.n_test is None else args.n_test
    if args.n_train < 1 or args.n_test < 0:
        raise ConfigError(f"data synth: --n-train must be >= 1 and --n-test >= 0, got {args.n_train} and {args.n_test}")
    _check_kind_flags(args)
    args.duration = 16 if args.duration is None else args.duration
    try:
        if args.kind == "video":
            from mmrl.data.synth_video import check_world_args, make_video_world

            check_world_args(args.size, args.frames, args.fps)
            info = make_video_world(args.out, args.n_train, args.n_test, seed=args.seed, size=args.size,
                                    n_frames=args.frames, fps=args.fps, fixed_options=args.fixed_options,
                                    prior=args.prior, prior_strength=args.prior_strength)
        else:
            if args.size < 24 or args.size % 2:
                raise ValueError(f"size must be an even number >= 24, got {args.size}")
            info = _SYNTH_KINDS[args.kind](args)
    except ValueError as e:
        msg = str(e)
        for name, flag in _SYNTH_FLAGS.items():
            if msg.startswith(name + " "):
                msg = flag + msg[len(name):]
        raise ConfigError(f"data synth: {msg}") from None
    print(json.dumps(info, indent=2, default=str))


def add_synth_arguments(s: argparse.ArgumentParser) -> None:
    """The arguments of ``mmrl data synth``."""
    s.add_argument("--out", required=True, help="output folder (videos/ or images/, train.json, test.json)")
    s.add_argument("--kind", choices=["video", "image", "claims", "mood", "seek", "stream", "vhop"], default="video",
                   help="video clips; single images; images with checkable visual claims (PACG/VPPO); images with "
                        "an emotional cue region (DSPO); long clips with a brief event to seek (tools); video "
                        "streams with OVO-Bench annotations and their blocks (streaming agents); a linked image "
                        "corpus with multi-hop queries (VHOP retrieval; --n-train/--n-test count queries)")
    s.add_argument("--n-train", type=int, default=None,
                   help=f"training questions (default {_COUNTS[None][0]}; " + ", ".join(
                       f"{k} {v[0]}" for k, v in _COUNTS.items() if k) + ": what the world holds)")
    s.add_argument("--n-test", type=int, default=None,
                   help=f"held-out questions (default {_COUNTS[None][1]}; " + ", ".join(
                       f"{k} {v[1]}" for k, v in _COUNTS.items() if k) + ")")
    s.add_argument("--seed", type=int, default=0, help="world seed")
    s.add_argument("--size", type=int, default=56, help="frame side in pixels (even, >= 24)")
    s.add_argument("--frames", type=int, default=8, help="frames per clip (>= 4; video)")
    s.add_argument("--fps", type=float, default=4.0, help="frames per second of the clips (video)")
    s.add_argument("--duration", type=int, default=None, help="seconds per stream (stream; default 16)")
    s.add_argument("--fixed-options", action="store_true",
                   help="list every question's whole answer pool in a fixed order (the demo's world; video, seek)")
    s.add_argument("--prior", choices=["frequent", "phrasing", "tint"], default=None,
                   help="video: a prior to unlearn in the train split (test.json debiased, test_biased.json not)")
    s.add_argument("--prior-strength", type=float, default=0.8, help="P(a train answer follows the prior)")
    s.add_argument("--unsupported-source", choices=["random", "prior"], default=None,
                   help="claims: an unsupported claim is a random wrong value (default) or repeats a prior the "
                        "question states")
    s.add_argument("--teacher-seek", choices=SEEK_STYLES, default=None,
                   help="seek: the teacher seeks a 2 s window of whole seconds (default) or the exact flash interval")
    s.add_argument("--time-in-question", action="store_true",
                   help="seek: the question names the 2 s window that holds the flash")
    s.add_argument("--n-val", type=int, default=None,
                   help="seek: val.json, the train stream's next N clips (a validation split, e.g. for rectify.val)")
    s.set_defaults(fn=cmd_synth)
