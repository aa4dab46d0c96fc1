"""Counterfactual views of decoded media: transforms, view sets (YAML in ``views/``) and a preview sheet."""
from mmrl.views.transforms import (DESTROYED, EFFECTS, MAPPED, UNCHANGED, UNKNOWN, VIEW_TRANSFORMS, TransformInfo,
                                   apply_transform, transform_info, view_transform)
from mmrl.views.viewset import ROLES, ViewSet, ViewSpec, map_answer, register_role, view_seed
from mmrl.views.preview import make_contact_sheet

__all__ = [
    "VIEW_TRANSFORMS", "view_transform", "transform_info", "apply_transform", "TransformInfo",
    "UNCHANGED", "MAPPED", "DESTROYED", "UNKNOWN", "EFFECTS",
    "ViewSet", "ViewSpec", "ROLES", "register_role", "map_answer", "view_seed", "make_contact_sheet",
]
