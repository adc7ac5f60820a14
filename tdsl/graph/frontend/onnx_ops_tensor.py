"""ONNX converters for indexing and data-movement operators added for real exported
networks: GatherElements, Trilu, ScatterND, ScatterElements, Resize. Registered into
registry.py's table when the reader imports this module."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Const
from ..ir.ops_scatter import REDUCTIONS
from .registry import norm_axis, converter


@converter("GatherElements")
def _gather_elements(ctx, node, ins, attrs):
    x, idx = ins
    return ctx.call("gather_elements", [x, idx], axis=norm_axis(attrs.get("axis", 0), x.type.ndim))


@converter("GatherND")
def _gather_nd(ctx, node, ins, attrs):
    x, idx = ins
    return ctx.call("gather_nd", [x, idx], batch_dims=int(attrs.get("batch_dims", 0)))


@converter("Trilu")
def _trilu(ctx, node, ins, attrs):
    k = 0
    if len(ins) > 1 and ins[1] is not None:
        k = int(np.asarray(ctx.static(ins[1], "Trilu k")).reshape(-1)[0])
    return ctx.call("trilu", [ins[0]], upper=bool(attrs.get("upper", 1)), k=k)


def _reduction(op, attrs):
    red = attrs.get("reduction", "none")
    if isinstance(red, bytes):
        red = red.decode()
    if red not in REDUCTIONS:
        raise GraphError(f"{op}: unknown reduction '{red}' (one of {', '.join(REDUCTIONS)})")
    return red


@converter("ScatterND")
def _scatter_nd(ctx, node, ins, attrs):
    # the graph operator is a copy of the data and one update over the indices
    # (strategy/topi_scatter.py): the indices may be computed at run time
    x, idx, upd = ins
    return ctx.call("scatter_nd", [x, idx, upd], reduction=_reduction("ScatterND", attrs))


@converter("ScatterElements")
def _scatter_elements(ctx, node, ins, attrs):
    x, idx, upd = ins
    return ctx.call("scatter_elements", [x, idx, upd], axis=norm_axis(attrs.get("axis", 0), x.type.ndim),
                    reduction=_reduction("ScatterElements", attrs))


# ---------------------------------------------------------------------------- Resize

_COORD_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_half_pixel_for_nn", "half_pixel_symmetric")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(mode, n_in, n_out, scale):
    """ONNX's coordinate_transformation_mode: for each output position its position in the
    input, in float32 as onnxruntime computes it (nearest ties depend on the rounding)."""
    f = np.float32
    x = np.arange(n_out, dtype=f)
    s = f(scale)
    if mode == "half_pixel":
        return (x + f(0.5)) / s - f(0.5)
    if mode == "pytorch_half_pixel":
        return (x + f(0.5)) / s - f(0.5) if n_out > 1 else np.zeros(n_out, f)
    if mode == "align_corners":
        return x * f(n_in - 1) / f(n_out - 1) if n_out > 1 else np.zeros(n_out, f)
    if mode == "asymmetric":
        return x / s
    if mode == "tf_half_pixel_for_nn":
        return (x + f(0.5)) / s
    adj = f(n_out) / (s * f(n_in))            # half_pixel_symmetric
    offset = f(n_in) / f(2) * (f(1) - adj)
    return offset + (x + f(0.5)) / s - f(0.5)


def _nearest_taps(xo, n_in, mode):
    fl = np.floor(xo)
    if mode == "round_prefer_floor":
        i = np.where(xo - fl == np.float32(0.5), fl, np.round(xo))
    elif mode == "round_prefer_ceil":
        i = np.where(xo - fl == np.float32(0.5), fl + 1, np.round(xo))
    elif mode == "floor":
        i = fl
    else:
        i = np.ceil(xo)
    return [(np.clip(i, 0, n_in - 1).astype(np.int64), None)]


def _linear_taps(xo, n_in):
    x = np.clip(xo, 0, n_in - 1)
    i0 = np.floor(x).astype(np.int64)
    w1 = (x - i0).astype(np.float64)
    return [(i0, 1 - w1), (np.minimum(i0 + 1, n_in - 1), w1)]


def _cubic_taps(xo, n_in, a, exclude_outside):
    fl = np.floor(xo)
    r = (xo - fl).astype(np.float64)
    d = [r + 1, r, 1 - r, 2 - r]           # distances of the taps floor-1 .. floor+2

    def kernel(t):
        near = ((a + 2) * t - (a + 3)) * t * t + 1
        far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
        return np.where(t <= 1, near, far)
    taps = []
    for k, dist in zip(range(-1, 3), d):
        i = fl.astype(np.int64) + k
        w = kernel(dist)
        if exclude_outside:
            w = np.where((i >= 0) & (i < n_in), w, 0)
        taps.append((np.clip(i, 0, n_in - 1), w))
    if exclude_outside:
        total = sum(w for _, w in taps)
        taps = [(i, w / total) for i, w in taps]
    return taps


def _resize_sizes(ctx, x, ins, attrs):
    """(output sizes, scales) per dimension from the scales or sizes input (and opset 18's
    axes and keep_aspect_ratio_policy)."""
    n = x.type.ndim
    shp = x.type.shape
    axes = [norm_axis(a, n) for a in attrs.get("axes", range(n))]

    def given(k, what):
        if len(ins) <= k or ins[k] is None:
            return None
        v = np.asarray(ctx.static(ins[k], f"Resize {what}")).reshape(-1)
        return v if v.size else None
    scales_in = given(2 if ctx.opset >= 11 else 1, "scales")
    sizes_in = given(3, "sizes") if ctx.opset >= 11 else None
    if (scales_in is None) == (sizes_in is None):
        raise GraphError("Resize needs exactly one of the scales and sizes inputs")
    scales = [1.0] * n
    sizes = list(shp)
    if scales_in is not None:
        if len(scales_in) != len(axes):
            raise GraphError(f"Resize: {len(scales_in)} scales for {len(axes)} axes")
        for a, s in zip(axes, scales_in):
            if not s > 0:
                raise GraphError(f"Resize: scale {s} must be positive")
            scales[a] = float(np.float32(s))
            if not isinstance(shp[a], int) and scales[a] == 1.0:
                continue        # a symbolic axis (a batch) kept as it is
            sizes[a] = int(np.floor(np.float32(shp[a]) * np.float32(s)))
        return sizes, scales
    if len(sizes_in) != len(axes):
        raise GraphError(f"Resize: {len(sizes_in)} sizes for {len(axes)} axes")
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    ratios = [_size_ratio(s, shp[a], a) for a, s in zip(axes, sizes_in)]
    if policy in ("not_larger", "not_smaller"):
        r = min(ratios) if policy == "not_larger" else max(ratios)
        if r != 1.0 and not all(isinstance(shp[a], int) for a in axes):
            raise GraphError(f"Resize: keep_aspect_ratio_policy '{policy}' scales a symbolic axis of "
                             f"{list(shp)}; only sizes known at import can be resized")
        for a in axes:
            scales[a] = r
            if isinstance(shp[a], int):      # else kept: r is 1 (checked above)
                sizes[a] = int(np.floor(np.float32(shp[a]) * np.float32(r) + np.float32(0.5)))
        return sizes, scales
    if policy != "stretch":
        raise GraphError(f"Resize: unknown keep_aspect_ratio_policy '{policy}'")
    for a, s, r in zip(axes, sizes_in, ratios):
        sizes[a], scales[a] = (int(s) if isinstance(shp[a], int) else shp[a]), r
    return sizes, scales


def _size_ratio(size, n_in, axis) -> float:
    """Output over input size of one axis of a Resize given by sizes. A symbolic axis (a
    batch, which an exporter writes into the sizes from the input's own Shape) must be
    kept as it is: resizing it would need taps known only at run time."""
    # a size computed from shapes may be a sympy Integer
    known = isinstance(size, (int, np.integer)) or getattr(size, "is_Integer", False)
    if isinstance(n_in, int) and known:
        return float(np.float32(int(size)) / np.float32(n_in))
    if not isinstance(n_in, int) and not known and size == n_in:
        return 1.0
    raise GraphError(f"Resize: output size {size} for axis {axis} of input size {n_in}: a symbolic "
                     "axis can only be kept as it is, and a kept one only resized to sizes known at import")


@converter("Resize")
def _resize(ctx, node, ins, attrs):
    # Separable: each resized axis is a take (nearest) or an interp (a few taps of constant
    # positions weighed by constant factors), both computed here as onnxruntime computes them (float32 coordinates).
    # Multilinear and bicubic interpolation are products of 1-D weights, so axis after axis
    # gives the same values up to rounding.
    x = ins[0]
    mode = attrs.get("mode", "nearest")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = attrs.get("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear", "cubic"):
        raise GraphError(f"Resize: unknown mode '{mode}'")
    if coord == "tf_crop_and_resize":
        raise GraphError("Resize with coordinate_transformation_mode='tf_crop_and_resize' is not supported")
    if coord not in _COORD_MODES:
        raise GraphError(f"Resize: unknown coordinate_transformation_mode '{coord}'")
    if nearest not in _NEAREST_MODES:
        raise GraphError(f"Resize: unknown nearest_mode '{nearest}'")
    if attrs.get("antialias", 0) and mode != "nearest":
        raise GraphError("Resize with antialias=1 is not supported")
    if mode != "nearest" and not x.type.dtype.startswith("float"):
        raise GraphError(f"Resize: {mode} interpolation of {x.type.dtype} data is not supported")
    sizes, scales = _resize_sizes(ctx, x, ins, attrs)
    legacy = ctx.opset < 11   # Resize-10: asymmetric coordinates; nearest floors when it
    if legacy:                # upsamples and takes the ceiling when it downsamples (onnxruntime)
        coord = "asymmetric"
    y = x
    axes = list(range(x.type.ndim))
    if mode != "nearest" and len(axes) >= 2 and sizes[-2] > x.type.shape[-2]:
        # rows upsampled: the columns first, on the fewer input rows, since a column's taps
        # are gathered along the row and a row's are two whole rows (contiguous vectors)
        axes[-2:] = axes[-1], axes[-2]
    for ax in axes:
        n_in, n_out, s = x.type.shape[ax], sizes[ax], scales[ax]
        if not isinstance(n_in, int) and n_out is n_in:
            continue           # a symbolic axis not resized (_resize_sizes)
        if n_out <= 0:
            raise GraphError(f"Resize: output size {n_out} along axis {ax}")
        xo = _source_coords(coord, n_in, n_out, s)
        if mode == "nearest":
            taps = _nearest_taps(xo, n_in, ("ceil" if s < 1 else "floor") if legacy else nearest)
        elif mode == "linear":
            taps = _linear_taps(xo, n_in)
        else:
            taps = _cubic_taps(xo, n_in, float(attrs.get("cubic_coeff_a", -0.75)),
                               bool(attrs.get("exclude_outside", 0)))
        taps = [(i, w) for i, w in taps if w is None or np.any(w != 0)]
        if len(taps) == 1 and n_in == n_out and np.array_equal(taps[0][0], np.arange(n_in)) and \
                (taps[0][1] is None or np.all(taps[0][1] == 1)):
            continue           # this axis is not resized
        if len(taps) == 1 and taps[0][1] is None:
            y = ctx.call("take", [y, Const(taps[0][0])], axis=ax)
        else:
            idx = np.stack([i for i, _ in taps])
            w = np.stack([np.ones(n_out) if w is None else w for _, w in taps]).astype(x.type.dtype)
            y = ctx.call("interp", [y, Const(idx), Const(w)], axis=ax)
    return y if y is not x else ctx.call("copy", [x])
