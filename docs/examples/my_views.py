"""A custom view transform (docs/own_videos.md, docs/reference/views.md): a still of one frame of the clip."""
import torch

from mmrl.data.schema import Media, Sample
from mmrl.views import view_transform
from mmrl.views.transforms import pixels, with_pixels


@view_transform("still", effect="unknown", kinds=("video",))
def still(media: Media, sample: Sample, rng: torch.Generator, at: float = 0.5) -> Media:
    """Every frame replaced by frame ``int(at * T)`` of the T frames: the motion is gone, what is on screen stays."""
    x = pixels(media)
    k = min(x.shape[0] - 1, int(at * x.shape[0]))
    return with_pixels(media, x[k : k + 1].expand_as(x).clone())
