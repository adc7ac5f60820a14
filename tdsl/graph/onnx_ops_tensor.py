"""ONNX converters for indexing and data-movement operators added for real exported
networks: GatherElements, ... Registered into `onnx_frontend`'s table when that module is
imported."""
from __future__ import annotations

from .onnx_frontend import _axis, converter


@converter("GatherElements")
def _gather_elements(ctx, node, ins, attrs):
    x, idx = ins
    return ctx.call("gather_elements", [x, idx], axis=_axis(attrs.get("axis", 0), x.type.ndim))
