"""ONNX converters for indexing and data-movement operators added for real exported
networks: GatherElements, Trilu, ScatterND, Resize. Registered into `onnx_frontend`'s table when that module is
imported."""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .ir import Const
from .onnx_frontend import _axis, _reshape, converter, fold_value


@converter("GatherElements")
def _gather_elements(ctx, node, ins, attrs):
    x, idx = ins
    return ctx.call("gather_elements", [x, idx], axis=_axis(attrs.get("axis", 0), x.type.ndim))


@converter("Trilu")
def _trilu(ctx, node, ins, attrs):
    k = 0
    if len(ins) > 1 and ins[1] is not None:
        k = int(np.asarray(ctx.static(ins[1], "Trilu k")).reshape(-1)[0])
    return ctx.call("trilu", [ins[0]], upper=bool(attrs.get("upper", 1)), k=k)


_SCATTER_COMBINE = {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}


@converter("ScatterND")
def _scatter_nd(ctx, node, ins, attrs):
    # Constant indices make the scatter a gather: for each indexed prefix position, which
    # update row (if any) lands there. The result is where(written, take(updates), data),
    # injective operators that fuse into one kernel. With a reduction, the j-th update to
    # each position is one more such layer combined into the result.
    x, idx, upd = ins
    red = attrs.get("reduction", "none")
    if red != "none" and red not in _SCATTER_COMBINE:
        raise GraphError(f"ScatterND: unknown reduction '{red}'")
    iv = fold_value(idx, ctx._fold_memo)
    if iv is None:
        raise GraphError("ScatterND indices must be known at compile time (a constant or computed "
                         "from constants and shapes), but they depend on a graph input")
    iv = np.asarray(iv, np.int64)
    q = iv.shape[-1]
    shp = x.type.shape
    if q > len(shp):
        raise GraphError(f"index tuples of length {q} for data of rank {len(shp)}")
    rows = iv.reshape(-1, q)
    rest = shp[q:]
    if upd.type.shape != tuple(iv.shape[:-1]) + tuple(rest):
        raise GraphError(f"updates {upd.type} do not fit indices {iv.shape} into data {x.type}")
    layers = []           # layers[j][position] = the row of the j-th update there, or -1
    seen = {}
    for r, t in enumerate(rows):
        t = tuple(int(v) + shp[d] if v < 0 else int(v) for d, v in enumerate(t))
        if not all(0 <= v < shp[d] for d, v in enumerate(t)):
            raise GraphError(f"index {tuple(int(v) for v in rows[r])} is out of range for data {x.type}")
        j = seen.get(t, 0) if red != "none" else 0   # without a reduction the last update wins
        seen[t] = j + 1
        if j == len(layers):
            layers.append(np.full(shp[:q], -1, np.int64))
        layers[j][t] = r
    flat = _reshape(ctx, upd, (rows.shape[0],) + tuple(rest))
    out = x
    for src in layers:
        taken = ctx.call("take", [flat, Const(np.maximum(src, 0))], axis=0)
        if red != "none":
            taken = ctx.call(_SCATTER_COMBINE[red], [out, taken])
        mask = Const((src >= 0).reshape(src.shape + (1,) * len(rest)))
        out = ctx.call("where", [mask, taken, out])
    return out
