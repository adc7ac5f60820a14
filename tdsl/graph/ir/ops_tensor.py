"""Layout and data-movement graph operators: reshape, transpose, concatenate, slices,
gathers, pad, broadcast_to."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .dims import equal, is_dim, product
from .registry import check_nargs, broadcast_shape, register
from .types import TensorType


# ---------------------------------------------------------------------------- layout / data movement

def _reshape_infer(types, attrs):
    check_nargs(types, 1)
    x = types[0]
    ns = attrs["newshape"]
    if not all(isinstance(s, int) and s >= 0 or not isinstance(s, int) and is_dim(s) for s in ns):
        raise GraphError(f"newshape {ns} must be non-negative integers (resolve -1 and 0 first)")
    if not equal(product(ns), x.size):
        raise GraphError(f"cannot reshape {x} ({x.size} elements) to {tuple(ns)}")
    return TensorType(ns, x.dtype)


register("reshape", "injective", _reshape_infer, lambda x, a: x.reshape(a["newshape"]), required=("newshape",))


def _transpose_infer(types, attrs):
    check_nargs(types, 1)
    x = types[0]
    ax = attrs["axes"]
    if sorted(ax) != list(range(x.ndim)):
        raise GraphError(f"axes {ax} is not a permutation of {x.ndim} dimensions")
    return TensorType([x.shape[i] for i in ax], x.dtype)


register("transpose", "injective", _transpose_infer, lambda x, a: np.transpose(x, a["axes"]),
         required=("axes",))


def _concat_infer(types, attrs):
    if not types:
        raise GraphError("needs at least one input")
    x = types[0]
    ax = attrs["axis"]
    if not 0 <= ax < x.ndim:
        raise GraphError(f"axis {ax} out of range for rank {x.ndim}")
    total = 0
    for t in types:
        if t.ndim != x.ndim or t.dtype != x.dtype or any(
                not equal(t.shape[d], x.shape[d]) for d in range(x.ndim) if d != ax):
            raise GraphError(f"input {t} does not fit {x} along axis {ax}")
        total += t.shape[ax]
    shape = list(x.shape)
    shape[ax] = total
    return TensorType(shape, x.dtype)


register("concatenate", "injective", _concat_infer,
         lambda *xs: np.concatenate(xs[:-1], axis=xs[-1]["axis"]), required=("axis",))


def slice_len(begin, end, stride):
    if isinstance(begin, int) and isinstance(end, int):
        if stride > 0:
            return max(0, -(-(end - begin) // stride))
        return max(0, -(-(begin - end) // -stride))
    import sympy
    n = end - begin if stride > 0 else begin - end
    n = n if abs(stride) == 1 else sympy.ceiling(sympy.sympify(n) / abs(stride))
    n = sympy.Max(0, n)
    return n if not getattr(n, "is_Integer", False) else int(n)


def _slice_infer(types, attrs):
    check_nargs(types, 1)
    x = types[0]
    b, e, s = attrs["begin"], attrs["end"], attrs["strides"]
    if not (len(b) == len(e) == len(s) == x.ndim):
        raise GraphError(f"begin/end/strides need {x.ndim} entries each")
    shape = []
    for d in range(x.ndim):
        if s[d] == 0:
            raise GraphError("a stride of 0")
        lo, hi = (0, x.shape[d]) if s[d] > 0 else (-1, x.shape[d] - 1)
        if all(isinstance(v, int) for v in (hi, b[d], e[d])) and not (lo <= b[d] <= hi and lo <= e[d] <= hi):
            raise GraphError(f"begin {b[d]}/end {e[d]} out of range for dim {d} of size {x.shape[d]} (normalize first)")
        shape.append(slice_len(b[d], e[d], s[d]))
    return TensorType(shape, x.dtype)


def _slice_ref(x, a):
    sl = tuple(slice(b, (None if e < 0 else e), s) for b, e, s in zip(a["begin"], a["end"], a["strides"]))
    return x[sl].copy()


register("strided_slice", "injective", _slice_infer, _slice_ref, required=("begin", "end", "strides"))


def _data_and_indices(types, attrs):
    """(data type, indices type, axis) of a gather-like operator, checked."""
    check_nargs(types, 2)
    x, idx = types
    ax = attrs["axis"]
    if not 0 <= ax < x.ndim:
        raise GraphError(f"axis {ax} out of range for rank {x.ndim}")
    if not idx.dtype.startswith(("int", "uint")):
        raise GraphError(f"indices must be integers, got {idx.dtype}")
    return x, idx, ax


def _take_infer(types, attrs):
    x, idx, ax = _data_and_indices(types, attrs)
    return TensorType(x.shape[:ax] + idx.shape + x.shape[ax + 1:], x.dtype)


def _take_ref(x, idx, a):
    ax = a["axis"]
    i = np.where(idx < 0, idx + x.shape[ax], idx)
    return np.take(x, i, axis=ax)


register("take", "injective", _take_infer, _take_ref, {"axis": 0})


def _gather_nd_infer(types, attrs):
    check_nargs(types, 2)
    x, idx = types
    b = attrs["batch_dims"]
    if not idx.dtype.startswith(("int", "uint")):
        raise GraphError(f"indices must be integers, got {idx.dtype}")
    if idx.ndim < 1 or not isinstance(idx.shape[-1], int):
        raise GraphError(f"indices {idx} need a last axis of a fixed size")
    k = idx.shape[-1]
    if not 0 <= b < min(x.ndim, idx.ndim) or b + k > x.ndim:
        raise GraphError(f"batch_dims {b} and index depth {k} do not fit data {x} and indices {idx}")
    if any(not equal(x.shape[d], idx.shape[d]) for d in range(b)):
        raise GraphError(f"the first {b} axes of data {x} and indices {idx} differ")
    return TensorType(tuple(idx.shape[:-1]) + tuple(x.shape[b + k:]), x.dtype)


def _gather_nd_ref(x, idx, a):
    b, k = a["batch_dims"], idx.shape[-1]
    lead = int(np.prod(idx.shape[:b], dtype=np.int64))
    xs = x.reshape((lead,) + x.shape[b:])
    ids = idx.reshape((lead, -1, k))
    out = []
    for n in range(lead):
        pos = tuple(np.where(ids[n, :, t] < 0, ids[n, :, t] + xs.shape[1 + t], ids[n, :, t]) for t in range(k))
        out.append(xs[n][pos])
    return np.stack(out).reshape(tuple(idx.shape[:-1]) + x.shape[b + k:])


# ONNX GatherND: out[i..., j...] = data[batch i..., indices[i..., :], j...]
register("gather_nd", "injective", _gather_nd_infer, _gather_nd_ref, {"batch_dims": 0})


def _gather_elements_infer(types, attrs):
    x, idx, ax = _data_and_indices(types, attrs)
    if idx.ndim != x.ndim or any(idx.shape[d] > x.shape[d] for d in range(x.ndim) if d != ax):
        raise GraphError(f"indices {idx} do not fit data {x} (same rank, no larger off axis {ax})")
    return TensorType(idx.shape, x.dtype)


def _gather_elements_ref(x, idx, a):
    ax = a["axis"]
    i = np.where(idx < 0, idx + x.shape[ax], idx)
    return np.take_along_axis(x[tuple(slice(0, s) if d != ax else slice(None) for d, s in enumerate(idx.shape))],
                              i, axis=ax)


register("gather_elements", "injective", _gather_elements_infer, _gather_elements_ref, {"axis": 0})


def _pad_infer(types, attrs):
    check_nargs(types, 1)
    x = types[0]
    pw = attrs["pad_width"]
    if len(pw) != x.ndim or any(len(p) != 2 for p in pw):
        raise GraphError(f"pad_width needs {x.ndim} [before, after] pairs")
    shape = [s + p[0] + p[1] for s, p in zip(x.shape, pw)]
    if any(v < 0 for v in shape):
        raise GraphError(f"padding {pw} makes a negative size")
    if attrs["mode"] not in ("constant", "edge", "reflect", "wrap"):
        raise GraphError(f"unknown pad mode {attrs['mode']!r}")
    return TensorType(shape, x.dtype)


def _pad_ref(x, a):
    pw = a["pad_width"]
    crop = tuple(slice(max(0, -b), x.shape[d] - max(0, -e)) for d, (b, e) in enumerate(pw))
    x = x[crop]
    pos = [(max(0, b), max(0, e)) for b, e in pw]
    if a["mode"] == "constant":
        return np.pad(x, pos, constant_values=np.asarray(a["pad_value"]).astype(x.dtype))
    return np.pad(x, pos, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[a["mode"]])


register("nn.pad", "injective", _pad_infer, _pad_ref, {"pad_value": 0.0, "mode": "constant"},
         required=("pad_width",))


def _bcast_to_infer(types, attrs):
    check_nargs(types, 1)
    x = types[0]
    shape = tuple(attrs["shape"])
    if broadcast_shape(x.shape, shape) != shape:
        raise GraphError(f"{x} does not broadcast to {shape}")
    return TensorType(shape, x.dtype)


def _arange_infer(types, attrs):
    check_nargs(types, 0)
    return TensorType(attrs["shape"], attrs["dtype"])


def _arange_ref(a):
    n = a["shape"][0]
    return (a["start"] + a["step"] * np.arange(n)).astype(a["dtype"])


# start + step * i for i < shape[0]: a Range whose length is a symbolic size
register("arange", "injective", _arange_infer, _arange_ref, {"start": 0, "step": 1},
         required=("shape", "dtype"))


def _size_values_infer(types, attrs):
    check_nargs(types, 0)
    vals = attrs["values"]
    if not all(is_dim(v) for v in vals):
        raise GraphError(f"values {vals} must be integers or symbolic sizes")
    return TensorType(attrs["shape"], attrs["dtype"])


# an integer tensor of symbolic sizes (what ONNX's Shape gives for symbolic dimensions,
# where a network computes with it): its values are the sizes of each call
register("size_values", "injective", _size_values_infer,
         lambda a: np.asarray(a["values"], a["dtype"]).reshape(a["shape"]), {"dtype": "int64"},
         required=("values", "shape"))


register("broadcast_to", "broadcast", _bcast_to_infer,
         lambda x, a: np.broadcast_to(x, a["shape"]).copy(), required=("shape",))
