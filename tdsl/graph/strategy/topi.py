"""Tensor-expression definitions of the graph operators (the L0 API a user writes).

`TE[op](inputs, attrs, out_type)` returns a `tdsl.Tensor`. Anchor operators (conv, dense,
matmul) and opaque ones with a packed or staged form also have fast definitions in cpu/, and
groupdef.py chooses between those and the generic one here; topi_nn.py and topi_index.py add
the other families to `TE`.
"""
from __future__ import annotations

import contextvars
import itertools

import numpy as np

import tdsl

_names = itertools.count()
# Sizes of a kernel generic in some dimension (cpu/generic.py): the size variables'
# values in the group being compiled, so that the heuristics of a schedule (work per
# thread, tile fits) can read a number; the kernel itself takes the size at call time.
representative: "contextvars.ContextVar[dict]" = contextvars.ContextVar("representative", default={})


def reset_names():
    """Numbers names from 0 again: each group's kernel then gets the same names in every
    build, so its compile-cache keys match across builds in one process too."""
    global _names
    _names = itertools.count()


def uname(base):
    return f"{base.replace('.', '_')}_{next(_names)}"


def c(v, dtype):
    return tdsl.const(v, dtype)


def bidx(out_ndim, t, idx):
    """Broadcast index of tensor `t` for output index `idx`."""
    k = out_ndim - t.ndim
    return tuple(0 if _is_one(t.shape[d]) else idx[k + d] for d in range(t.ndim))


def _is_one(s):
    v = getattr(s, "value", s)         # a size variable is never taken for 1
    return isinstance(v, (int, np.integer)) and v == 1


def dim(s):
    """A size as an int; a size variable of a generic kernel reads as its value in the
    group being compiled (`representative`)."""
    v = getattr(s, "value", None)
    if v is not None or isinstance(s, (int, np.integer)):
        return int(s if v is None else v)
    from ...arith import simplify
    from ...ir.expr import IntImm
    from ...ir.visitor import free_vars, substitute
    sizes = representative.get()
    e = simplify(substitute(s, {x: IntImm(sizes[x.name], x.dtype) for x in free_vars(s) if x.name in sizes}))
    if getattr(e, "value", None) is None:
        raise TypeError(f"size {s} is not a number")
    return int(e.value)


# Whether the group being compiled has symbolic sizes (a network with a symbolic batch or
# sequence): its definitions then keep them as index expressions, and only schedules'
# heuristics read numbers (`dim`)
symbolic_sizes: "contextvars.ContextVar[bool]" = contextvars.ContextVar("symbolic_sizes", default=False)


def shape_of(t):
    """The shape of tensor `t` for a definition: ints, except in a group with symbolic
    sizes, where a symbolic size stays the index expression it is."""
    if symbolic_sizes.get():
        return tuple(int(s.value) if getattr(s, "value", None) is not None else s
                     if not isinstance(s, (int, np.integer)) else int(s) for s in t.shape)
    return tuple(dim(s) for s in t.shape)


# ---------------------------------------------------------------------------- elementwise

def is_float(dt):
    return dt.startswith("float")


def _relu(x):
    return tdsl.max(x, c(0, x.dtype))


UNARY_EXPR = {
    "nn.relu": lambda x, a: _relu(x),
    "sigmoid": lambda x, a: tdsl.sigmoid(x),
    "tanh": lambda x, a: tdsl.tanh(x),
    "erf": lambda x, a: tdsl.erf(x),
    "exp": lambda x, a: tdsl.exp(x),
    "log": lambda x, a: tdsl.log(x),
    "sqrt": lambda x, a: tdsl.sqrt(x),
    "negative": lambda x, a: c(0, x.dtype) - x,
    "abs": lambda x, a: tdsl.abs(x),
    "floor": lambda x, a: tdsl.floor(x),
    "round": lambda x, a: tdsl.nearbyint(x),      # half to even, as ONNX Round
    "ceil": lambda x, a: tdsl.ceil(x),
    "reciprocal": lambda x, a: c(1, x.dtype) / x,
    "copy": lambda x, a: x,
    "logical_not": lambda x, a: ~x,
    "nn.leaky_relu": lambda x, a: tdsl.if_then_else(x >= c(0, x.dtype), x, x * c(a["alpha"], x.dtype)),
    "clip": lambda x, a: tdsl.max(tdsl.min(x, _clip_const(a["a_max"], x.dtype)), _clip_const(a["a_min"], x.dtype)),
    "cast": lambda x, a: _cast(x, a["dtype"]),
    "nn.hard_sigmoid": lambda x, a: _clamp01(x * c(a["alpha"], x.dtype) + c(a["beta"], x.dtype)),
    "nn.hard_swish": lambda x, a: x * _clamp01(x / c(6, x.dtype) + c(0.5, x.dtype)),
    "isnan": lambda x, a: tdsl.isnan(x),
    "isinf": lambda x, a: _isinf(x, a),
}


def _clamp01(v):
    return tdsl.max(tdsl.min(v, c(1, v.dtype)), c(0, v.dtype))


def _isinf(x, a):
    r = tdsl.isinf(x)
    if not a["detect_positive"]:
        r = r & (x < c(0, x.dtype))
    if not a["detect_negative"]:
        r = r & (x > c(0, x.dtype))
    return r


def _clip_const(v, dt):
    if not is_float(dt):
        info = np.iinfo(dt)
        v = int(min(max(v, info.min), info.max))
    return c(v, dt)


def _cast(x, dt):
    if dt == "bool":
        return x != c(0, x.dtype)
    return tdsl.cast(x, dt)


def _div(a, b):
    if is_float(a.dtype):
        return a / b
    q = a // b
    if a.dtype.startswith("uint"):
        return q
    return tdsl.if_then_else(tdsl.all(q * b != a, (a < c(0, a.dtype)) != (b < c(0, b.dtype))), q + c(1, a.dtype), q)


def _floor_mod(a, b):
    if is_float(a.dtype):
        r = tdsl.fmod(a, b)
        zero = c(0, a.dtype)
        return tdsl.if_then_else(tdsl.all(r != zero, (r < zero) != (b < zero)), r + b, r)
    # tdsl's % on integers has Python's floor meaning already; ONNX leaves x % 0 undefined,
    # numpy (our reference) gives 0, so guard the divisor rather than trap
    return tdsl.if_then_else(b == c(0, b.dtype), c(0, a.dtype), a % tdsl.if_then_else(b == c(0, b.dtype), c(1, b.dtype), b))


def _pow(a, b):
    if is_float(a.dtype):
        return tdsl.power(a, tdsl.cast(b, a.dtype))
    r = tdsl.power(tdsl.cast(a, "float64"), tdsl.cast(b, "float64"))
    return tdsl.cast(tdsl.round(r), a.dtype)


BINARY_EXPR = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": _div,
    "power": _pow,
    "floor_mod": _floor_mod,
    "trunc_mod": lambda a, b: tdsl.fmod(a, b),
    "maximum": lambda a, b: tdsl.max(a, b),
    "minimum": lambda a, b: tdsl.min(a, b),
    "equal": lambda a, b: a == b,
    "not_equal": lambda a, b: a != b,
    "less": lambda a, b: a < b,
    "greater": lambda a, b: a > b,
    "less_equal": lambda a, b: a <= b,
    "greater_equal": lambda a, b: a >= b,
    "logical_and": lambda a, b: a & b,
    "logical_or": lambda a, b: a | b,
}


def unary(op):
    f = UNARY_EXPR[op]

    def build(ins, attrs, out):
        (x,) = ins
        return tdsl.compute(out.shape, lambda *i: f(x[i], attrs), name=uname(op))
    return build


def binary(op):
    f = BINARY_EXPR[op]

    def build(ins, attrs, out):
        a, b = ins
        n = len(out.shape)
        return tdsl.compute(out.shape, lambda *i: f(a[bidx(n, a, i)], b[bidx(n, b, i)]), name=uname(op))
    return build


def where(ins, attrs, out):
    cnd, a, b = ins
    n = len(out.shape)
    return tdsl.compute(out.shape, lambda *i: tdsl.if_then_else(cnd[bidx(n, cnd, i)], a[bidx(n, a, i)], b[bidx(n, b, i)]),
                        name=uname("where"))


def bias_add(ins, attrs, out):
    x, b = ins
    ax = attrs["axis"]
    return tdsl.compute(out.shape, lambda *i: x[i] + b[i[ax]], name=uname("bias_add"))


def batch_norm(ins, attrs, out):
    x, g, b, m, v = ins
    eps = attrs["epsilon"]
    dt = x.dtype

    def f(*i):
        ch = i[1]
        return (x[i] - m[ch]) / tdsl.sqrt(v[ch] + c(eps, dt)) * g[ch] + b[ch]
    return tdsl.compute(out.shape, f, name=uname("batch_norm"))


# ---------------------------------------------------------------------------- injective

def prod(dims):
    """The product of sizes: an int, or an index expression where one is symbolic."""
    out = 1
    for d in dims:
        out = out * d if not (isinstance(out, int) and out == 1) else d
    return int(out) if isinstance(out, (int, np.integer)) else out


def count(dims, dtype):
    """The number of elements of `dims` (at least 1) as a value of `dtype`: a mean's divisor."""
    n = prod(dims)
    if isinstance(n, int):
        return c(max(n, 1), dtype)
    return tdsl.cast(tdsl.max(n, 1), dtype)


def _is_const(v, k):
    return isinstance(v, (int, np.integer)) and v == k


def _monomial(d):
    """(integer coefficient, sorted size variable names) of a size that is a product of
    numbers and size variables; None for anything else."""
    from ...ir import expr as E
    if isinstance(d, (int, np.integer)):
        return int(d), ()
    if isinstance(d, E.IntImm):
        return int(d.value), ()
    if isinstance(d, E.Var):
        return 1, (d.name,)
    if isinstance(d, E.Mul):
        a, b = _monomial(d.a), _monomial(d.b)
        if a is None or b is None:
            return None
        return a[0] * b[0], tuple(sorted(a[1] + b[1]))
    return None


def _divides(a, b) -> bool:
    """Whether monomial a divides monomial b."""
    rest = list(b[1])
    for v in a[1]:
        if v not in rest:
            return False
        rest.remove(v)
    return a[0] != 0 and b[0] % a[0] == 0


def _times(a, b):
    return a[0] * b[0], tuple(sorted(a[1] + b[1]))


def _reshape_groups(ishape, oshape):
    """The runs of input and output axes whose sizes multiply to the same, in order
    ([((i0, i1), (o0, o1)), ...]: input axes i0..i1-1 hold output axes o0..o1-1), where
    every size is a product of numbers and size variables; None otherwise. A reshape
    that merges or splits axes within such runs indexes each run on its own: with
    symbolic sizes, one flat index through all axes divides by run-time products that
    no simplification takes back out of a vector's index."""
    im = [_monomial(d) for d in ishape]
    om = [_monomial(d) for d in oshape]
    if None in im or None in om:
        return None
    groups, i, o = [], 0, 0
    while i < len(im) or o < len(om):
        i0, o0 = i, o
        pi, po = (1, ()), (1, ())
        if i < len(im):
            pi, i = im[i], i + 1
        if o < len(om):
            po, o = om[o], o + 1
        while pi != po:
            # grow the side whose product divides the other's
            if _divides(pi, po) and i < len(im):
                pi, i = _times(pi, im[i]), i + 1
            elif _divides(po, pi) and o < len(om):
                po, o = _times(po, om[o]), o + 1
            else:
                return None
        groups.append(((i0, i), (o0, o)))
    return groups


def reshape(ins, attrs, out):
    (x,) = ins
    ishape = shape_of(x)
    oshape = out.shape
    if symbolic_sizes.get():
        groups = _reshape_groups(ishape, oshape)
        if groups is not None and len(groups) > 1:
            return _grouped_reshape(x, ishape, oshape, groups)
    ostr = [prod(oshape[d + 1:]) for d in range(len(oshape))]
    istr = [prod(ishape[d + 1:]) for d in range(len(ishape))]

    def f(*i):
        flat = None
        for d, iv in enumerate(i):
            if _is_const(oshape[d], 1):
                continue
            t = iv * ostr[d] if not _is_const(ostr[d], 1) else iv
            flat = t if flat is None else flat + t
        if flat is None:
            flat = c(0, "int32")
        idx = []
        for d in range(len(ishape)):
            if _is_const(ishape[d], 1):
                idx.append(0)
                continue
            e = flat // istr[d] if not _is_const(istr[d], 1) else flat
            # the outermost axis that is not 1 needs no wrap-around
            if any(not _is_const(ishape[k], 1) for k in range(d)):
                e = e % ishape[d]
            idx.append(e)
        return x[tuple(idx)]
    return tdsl.compute(oshape, f, name=uname("reshape"))


def _grouped_reshape(x, ishape, oshape, groups):
    """A reshape indexed run by run (`_reshape_groups`)."""
    def f(*i):
        idx = []
        for (i0, i1), (o0, o1) in groups:
            flat = None
            for d in range(o0, o1):
                t = i[d] * prod(oshape[d + 1:o1]) if d + 1 < o1 else i[d]
                flat = t if flat is None else flat + t
            for d in range(i0, i1):
                e = flat if flat is not None else c(0, "int32")
                inner = prod(ishape[d + 1:i1])
                if not _is_const(inner, 1):
                    e = e // inner
                if d > i0:
                    e = e % ishape[d]
                idx.append(e)
        return x[tuple(idx)]
    return tdsl.compute(oshape, f, name=uname("reshape"))


def transpose(ins, attrs, out):
    (x,) = ins
    axes = attrs["axes"]
    inv = [axes.index(d) for d in range(len(axes))]
    return tdsl.compute(out.shape, lambda *i: x[tuple(i[inv[d]] for d in range(len(axes)))], name=uname("transpose"))


def phase_split_pad(x, rows, cols, sw, pt, pl, fill=None):
    """x (N, C, H, W) padded with `fill` (None: zero; a quantized image's zero point) (pt
    rows, pl columns before) and split by column phase: (N, C, rows, sw, cols) with
    [.., r, p, q] = padded[.., r, q * sw + p], so that every tap of a column-strided window
    reads a contiguous run of a row."""
    N, C, H, W = shape_of(x)
    f0 = tdsl.const(0, x.dtype) if fill is None else fill

    def fp(b, ch, r, p, q):
        iy, ix = r - pt, q * sw + p - pl
        return tdsl.if_then_else(tdsl.all(iy >= 0, iy < H, ix >= 0, ix < W), x[b, ch, iy, ix], f0)
    return tdsl.compute((N, C, rows, sw, cols), fp, name=uname("pad_phase"))


def concatenate(ins, attrs, out):
    ax = attrs["axis"]
    offs = [0]
    for t in ins:
        offs.append(offs[-1] + shape_of(t)[ax])

    def f(*i):
        val = None
        for k in range(len(ins) - 1, -1, -1):
            idx = list(i)
            idx[ax] = i[ax] - offs[k]
            v = ins[k][tuple(idx)]
            val = v if val is None else tdsl.if_then_else(i[ax] < offs[k + 1], v, val)
        return val
    return tdsl.compute(out.shape, f, name=uname("concat"))


def strided_slice(ins, attrs, out):
    (x,) = ins
    b, s = attrs["begin"], attrs["strides"]
    return tdsl.compute(out.shape, lambda *i: x[tuple(b[d] + i[d] * s[d] if (b[d], s[d]) != (0, 1) else i[d]
                                                      for d in range(len(i)))], name=uname("slice"))


def _gather_index(v, x, ax):
    return checked_index(v, shape_of(x), ax)


def checked_index(v, dims, ax):
    """Index `v` read from data into axis `ax` of a tensor of shape `dims`, negative ones
    counted from the end. One outside the axis becomes the product of the sizes up to `ax`,
    whose element lies past the end of the tensor whatever the other indices (an index
    wrapped into int32, or into the next row, can land inside it), so the check every build
    puts on indices read from memory reports it (tdsl.BoundsError) at a read or a write."""
    n = dims[ax]
    past = 1
    for d in dims[:ax + 1]:
        past = past * d
    # each use of `v` copies its expression (a gather of a gather nests them), so it is
    # read twice: once to wrap a negative index, once in the result; the range check is
    # one unsigned comparison of the wrapped index
    w = v + tdsl.if_then_else(v < 0, tdsl.cast(n, v.dtype), tdsl.const(0, v.dtype))
    unsigned = "uint64" if v.dtype.endswith("64") else "uint32"
    ok = tdsl.cast(w, unsigned) < tdsl.cast(n, unsigned)
    return tdsl.cast(tdsl.if_then_else(ok, w, tdsl.cast(past, v.dtype)), "int32")


def take(ins, attrs, out):
    x, idx = ins
    ax = attrs["axis"]
    k = len(idx.shape)

    def f(*i):
        j = _gather_index(idx[i[ax:ax + k]], x, ax)
        return x[i[:ax] + (j,) + i[ax + k:]]
    return tdsl.compute(out.shape, f, name=uname("take"))


def gather_nd(ins, attrs, out):
    x, idx = ins
    b, k = attrs["batch_dims"], shape_of(idx)[-1]
    q = len(idx.shape) - 1      # the output's axes that walk the index rows

    def f(*i):
        row = i[:q]
        pos = tuple(_gather_index(idx[row + (t,)], x, b + t) for t in range(k))
        return x[row[:b] + pos + i[q:]]
    return tdsl.compute(out.shape, f, name=uname("gather_nd"))


def gather_elements(ins, attrs, out):
    x, idx = ins
    ax = attrs["axis"]

    def f(*i):
        j = _gather_index(idx[i], x, ax)
        return x[i[:ax] + (j,) + i[ax + 1:]]
    return tdsl.compute(out.shape, f, name=uname("gather_elements"))


def pad(ins, attrs, out):
    (x,) = ins
    pw = attrs["pad_width"]
    mode = attrs["mode"]
    xs = shape_of(x)
    dt = x.dtype

    def f(*i):
        src = [i[d] - pw[d][0] if pw[d][0] else i[d] for d in range(len(i))]
        if mode == "constant":
            conds = []
            for d in range(len(i)):
                if pw[d][0] > 0:
                    conds.append(src[d] >= 0)
                if pw[d][1] > 0:
                    conds.append(src[d] < xs[d])
            v = x[tuple(src)]
            if not conds:
                return v
            return tdsl.if_then_else(tdsl.all(*conds), v, _clip_const(attrs["pad_value"], dt) if not is_float(dt) else c(attrs["pad_value"], dt))
        idx = []
        for d in range(len(i)):
            e = src[d]
            n = xs[d]
            if pw[d] == [0, 0] or tuple(pw[d]) == (0, 0):
                idx.append(e)
            elif mode == "edge":
                idx.append(tdsl.min(tdsl.max(e, 0), n - 1))
            elif mode == "reflect":
                e = tdsl.if_then_else(e < 0, 0 - e, e)
                idx.append(tdsl.if_then_else(e >= n, 2 * (n - 1) - e, e))
            else:  # wrap
                idx.append(e % n)
        return x[tuple(idx)]
    return tdsl.compute(out.shape, f, name=uname("pad"))


def broadcast_to(ins, attrs, out):
    (x,) = ins
    n = len(out.shape)
    return tdsl.compute(out.shape, lambda *i: x[bidx(n, x, i)], name=uname("broadcast"))


def arange(ins, attrs, out):
    start, step = attrs["start"], attrs["step"]
    dt = out.dtype
    return tdsl.compute(out.shape, lambda i: tdsl.cast(i, dt) * c(step, dt) + c(start, dt), name=uname("arange"))


def size_values(ins, attrs, out):
    """The sizes of the call as an integer tensor (what ONNX's Shape gave)."""
    vals = [tdsl.cast(v, out.dtype) if not isinstance(v, (int, np.integer)) else c(int(v), out.dtype)
            for v in attrs["values"]]

    def f(*i):
        flat = prod_index(i, out.shape)
        val = vals[-1]
        for k in range(len(vals) - 2, -1, -1):
            val = tdsl.if_then_else(flat == k, vals[k], val)
        return val
    return tdsl.compute(out.shape, f, name=uname("sizes"))


def prod_index(i, shape):
    """The row-major flat index of index `i` into `shape` (static)."""
    flat = c(0, "int32")
    for iv, n in zip(i, shape):
        flat = flat * n + iv
    return flat


TE = {}
for _op in UNARY_EXPR:
    TE[_op] = unary(_op)
for _op in BINARY_EXPR:
    TE[_op] = binary(_op)
TE.update({
    "where": where, "nn.bias_add": bias_add, "nn.batch_norm": batch_norm, "reshape": reshape,
    "transpose": transpose, "concatenate": concatenate, "strided_slice": strided_slice,
    "take": take, "gather_elements": gather_elements, "gather_nd": gather_nd, "nn.pad": pad, "broadcast_to": broadcast_to,
    "arange": arange, "size_values": size_values,
})
