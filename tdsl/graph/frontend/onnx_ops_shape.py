"""ONNX converters for shapes and data movement: Identity, constants, Shape, Range, Reshape,
Flatten, (Un)Squeeze, Transpose, Concat, Split, Slice, Gather, Pad, Expand. Registered into
registry.py's table when the reader imports this module."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Const, DimValues, Var
from ..ir.dims import as_dim, is_static, product
from ..ir.registry import broadcast_shape
from .registry import dmax, dmin, norm_axis, reshape_to, converter

@converter("Identity")
def _identity(ctx, node, ins, attrs):
    return ins[0]


@converter("Dropout")
def _dropout(ctx, node, ins, attrs):
    x = ins[0]
    training = False
    if len(ins) > 2 and ins[2] is not None:
        training = bool(np.asarray(ctx.static(ins[2], "Dropout training_mode")).reshape(-1)[0])
    ratio = 0.5
    if len(ins) > 1 and ins[1] is not None:
        ratio = float(np.asarray(ctx.static(ins[1], "Dropout ratio")).reshape(-1)[0])
    if training and ratio != 0:
        raise GraphError("Dropout in training mode (random masks) is not supported; export the model in eval mode")
    outs = [x]
    if len(node.output) > 1 and node.output[1]:
        outs.append(Const(np.ones(x.type.shape, bool)))
    return outs


@converter("Constant")
def _constant(ctx, node, ins, attrs):
    for k in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if k in attrs:
            v = attrs[k]
            if k.startswith("value_float"):
                return Const(np.asarray(v, np.float32))
            if k.startswith("value_int"):
                return Const(np.asarray(v, np.int64))
            return Const(v)
    raise GraphError(f"Constant: no supported value attribute among {sorted(attrs)}")


@converter("ConstantOfShape")
def _const_of_shape(ctx, node, ins, attrs):
    shape = ctx.dims(ins[0], "ConstantOfShape shape")
    v = attrs.get("value", np.zeros(1, np.float32))
    if is_static(shape):
        return Const(np.full(shape, v.reshape(-1)[0], v.dtype))
    return ctx.call("broadcast_to", [Const(v.reshape(()))], shape=shape)


@converter("Shape")
def _shape(ctx, node, ins, attrs):
    shape = ins[0].type.shape
    n = len(shape)
    start = attrs.get("start", 0)
    end = attrs.get("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    if is_static(shape[start:end]):
        return Const(np.asarray(shape[start:end], np.int64))
    return DimValues(shape[start:end])


@converter("Size")
def _size(ctx, node, ins, attrs):
    size = ins[0].type.size
    return Const(np.asarray(size, np.int64)) if isinstance(size, int) else DimValues(size)


@converter("Range")
def _range(ctx, node, ins, attrs):
    s, l, d = (ctx.static(i, "Range input") for i in ins)
    if s.dtype != object and l.dtype != object and d.dtype != object:
        return Const(np.arange(s, l, d).astype(s.dtype))
    # a symbolic length (positions 0..sequence): computed per call from the size
    start, limit, delta = (as_dim(np.asarray(v).reshape(-1)[0]) for v in (s, l, d))
    if not isinstance(start, int) or not isinstance(delta, int) or delta == 0:
        raise GraphError(f"Range: only a symbolic limit is supported, got start {start}, delta {delta}")
    import sympy
    n = as_dim(dmax(sympy.ceiling(sympy.Rational(1, 1) * (limit - start) / delta), 0)) \
        if delta < 0 else as_dim(sympy.ceiling((limit - start) / sympy.Integer(delta)))
    dtype = str(ins[0].type.dtype)
    return ctx.call("arange", [], start=start, step=delta, shape=[n], dtype=dtype)


# ---------------------------------------------------------------------------- shapes

@converter("Reshape")
def _reshape_conv(ctx, node, ins, attrs):
    x = ins[0]
    shape = ctx.dims(ins[1], "Reshape shape")
    allowzero = attrs.get("allowzero", 0)
    out = []
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            out.append(x.type.shape[i])
        else:
            out.append(s)
    if out.count(-1) > 1:
        raise GraphError(f"Reshape: more than one -1 in {shape}")
    if -1 in out:
        known = product([s for s in out if s != -1])
        rest = _exact_div(x.type.size, known)
        if rest is None:
            raise GraphError(f"Reshape: cannot infer -1 in {shape} for {x.type}")
        out[out.index(-1)] = rest
    return reshape_to(ctx, x, out) if tuple(out) != x.type.shape else ctx.call("copy", [x]) if isinstance(x, Var) else x


@converter("Flatten")
def _flatten(ctx, node, ins, attrs):
    x = ins[0]
    ax = int(attrs.get("axis", 1))
    ax = ax + x.type.ndim if ax < 0 else ax
    shp = x.type.shape
    return reshape_to(ctx, x, (product(shp[:ax]), product(shp[ax:])))


@converter("Squeeze")
def _squeeze(ctx, node, ins, attrs):
    x = ins[0]
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in ctx.static(ins[1], "Squeeze axes")]
    else:
        axes = attrs.get("axes")
    n = x.type.ndim
    if axes is None:
        axes = [d for d, s in enumerate(x.type.shape) if s == 1]
    axes = {norm_axis(a, n) for a in axes}
    for a in axes:
        if x.type.shape[a] != 1:
            raise GraphError(f"Squeeze: dimension {a} of {x.type} is not 1")
    return reshape_to(ctx, x, [s for d, s in enumerate(x.type.shape) if d not in axes])


@converter("Unsqueeze")
def _unsqueeze(ctx, node, ins, attrs):
    x = ins[0]
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in ctx.static(ins[1], "Unsqueeze axes")]
    else:
        axes = list(attrs["axes"])
    n = x.type.ndim + len(axes)
    axes = sorted(norm_axis(a, n) for a in axes)
    shape = list(x.type.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape_to(ctx, x, shape)


@converter("Transpose")
def _transpose(ctx, node, ins, attrs):
    x = ins[0]
    perm = list(attrs.get("perm", range(x.type.ndim - 1, -1, -1)))
    return ctx.call("transpose", [x], axes=[int(p) for p in perm])


@converter("Concat")
def _concat(ctx, node, ins, attrs):
    xs = [i for i in ins if i is not None and i.type.size > 0] or [ins[0]]
    if len(xs) == 1:
        return xs[0]
    return ctx.call("concatenate", xs, axis=norm_axis(attrs["axis"], xs[0].type.ndim))


@converter("Split")
def _split(ctx, node, ins, attrs):
    x = ins[0]
    ax = norm_axis(attrs.get("axis", 0), x.type.ndim)
    n = len(node.output)
    if len(ins) > 1 and ins[1] is not None:
        sizes = ctx.dims(ins[1], "Split split")
    elif "split" in attrs:
        sizes = list(attrs["split"])
    else:
        total = x.type.shape[ax]
        num = attrs.get("num_outputs", n)
        chunk = -(-total // num)
        sizes = [min(chunk, total - i * chunk) for i in range(num)]
    if sum(sizes) != x.type.shape[ax]:
        raise GraphError(f"Split: sizes {sizes} do not add up to {x.type.shape[ax]}")
    outs, start = [], 0
    for sz in sizes:
        b = [0] * x.type.ndim
        e = list(x.type.shape)
        b[ax], e[ax] = start, start + sz
        outs.append(ctx.call("strided_slice", [x], begin=b, end=e, strides=[1] * x.type.ndim))
        start += sz
    return outs


@converter("Slice")
def _slice(ctx, node, ins, attrs):
    x = ins[0]
    n = x.type.ndim
    starts = ctx.dims(ins[1], "Slice starts")
    ends = ctx.dims(ins[2], "Slice ends")
    axes = [int(v) for v in ctx.static(ins[3], "Slice axes")] if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = [int(v) for v in ctx.static(ins[4], "Slice steps")] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    b = [0] * n
    e = list(x.type.shape)
    st = [1] * n
    for s0, e0, a, sp in zip(starts, ends, axes, steps):
        a = norm_axis(a, n)
        dim = x.type.shape[a]
        if sp == 0:
            raise GraphError("Slice: a step of 0")
        s0 = s0 + dim if _negative(s0) else s0
        e0 = e0 + dim if _negative(e0) else e0
        if sp > 0:
            s0, e0 = dmin(dmax(s0, 0), dim), ctx.slice_end(dmax(e0, 0), dim)
        else:
            s0, e0 = dmin(dmax(s0, -1), dim - 1), dmin(dmax(e0, -1), dim - 1)
        b[a], e[a], st[a] = s0, e0, sp
    return ctx.call("strided_slice", [x], begin=b, end=e, strides=st)


def _negative(d) -> bool:
    """Whether a Slice bound counts from the end: a negative number (a symbolic bound is
    a size, never negative)."""
    return isinstance(d, int) and d < 0


def _exact_div(a, b):
    """a / b where it divides exactly (ints or symbolic sizes), else None."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    import sympy
    q = sympy.cancel(sympy.sympify(a) / b)
    return as_dim(q) if q.is_integer or q.is_Integer or (q.free_symbols and sympy.fraction(q)[1] == 1) else None


@converter("Gather")
def _gather(ctx, node, ins, attrs):
    x, idx = ins
    ax = norm_axis(attrs.get("axis", 0), x.type.ndim)
    if isinstance(idx, Const):
        iv = idx.data.astype(np.int64)
        iv = np.where(iv < 0, iv + x.type.shape[ax], iv)
        if iv.ndim == 0 and not isinstance(x, Const):
            b = [0] * x.type.ndim
            e = list(x.type.shape)
            b[ax], e[ax] = int(iv), int(iv) + 1
            y = ctx.call("strided_slice", [x], begin=b, end=e, strides=[1] * x.type.ndim)
            return reshape_to(ctx, y, [s for d, s in enumerate(x.type.shape) if d != ax])
        idx = Const(iv)
    return ctx.call("take", [x, idx], axis=ax)


@converter("Pad")
def _pad(ctx, node, ins, attrs):
    x = ins[0]
    n = x.type.ndim
    mode = attrs.get("mode", "constant")
    if len(ins) > 1:
        pads = [int(v) for v in ctx.static(ins[1], "Pad pads")]
        value = ctx.static(ins[2], "Pad constant_value").item() if len(ins) > 2 and ins[2] is not None else 0
        axes = [norm_axis(int(a), n) for a in ctx.static(ins[3], "Pad axes")] if len(ins) > 3 and ins[3] is not None else list(range(n))
    else:
        pads = list(attrs["pads"])
        value = attrs.get("value", 0.0)
        axes = list(range(n))
    pw = [[0, 0] for _ in range(n)]
    k = len(axes)
    for i, a in enumerate(axes):
        pw[a] = [pads[i], pads[i + k]]
    value = float(value) if x.type.dtype.startswith("float") else int(value)
    return ctx.call("nn.pad", [x], pad_width=pw, pad_value=value, mode=mode)


@converter("Expand")
def _expand(ctx, node, ins, attrs):
    x = ins[0]
    shape = ctx.dims(ins[1], "Expand shape")
    out = broadcast_shape(x.type.shape, shape)
    if out == x.type.shape:
        return x
    return ctx.call("broadcast_to", [x], shape=list(out))
