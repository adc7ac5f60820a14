"""Chains of convolutions kept channel-blocked (NCHW[x]c) between layers, as TVM's
AlterOpLayout and onnxruntime's NCHWc transformer do.

A CPU conv vectorizes along output channels: each kernel of the blocked conv accumulates
`bn` channels (one vector) per register, and the depthwise conv is one FMA per tap per
vector only when channels, not pixels, fill the vector (7- and 14-wide rows of a mobile
net leave a row vector half empty). Between two such convs an NCHW tensor costs a
transposing store in the first (on small 1x1 expansions it costs more than the conv
itself) and a strided or padded read in the second. Here the convs of a chain
write and read `(N, C/bn, H, W, bn)` tensors (ir/ops_layout.py); elementwise operators on
the way (bias, folded batch norm, activations, residual adds, squeeze-excite gates) work
on the blocked tensor with their per-channel constants re-laid out; `layout.from_blocked`
appears where a plain NCHW consumer (a pool, a concat, the network's output) reads, and
fuses into the producing kernel as its store.

A chain is convs that read others' outputs through elementwise operators only (two convs
that merely read one image are not one: squeezenet's expand convs), or through a
concatenation along the channels of conv outputs that are whole vectors of channels (a fire
module's expand convs and the next squeeze: the blocked images concatenate along their
block axis), or through a 2-D max pool (ResNet's after the stem, squeezenet's between
fires: a 3-D pool of the blocked image whose last window is one element, so each lane pools
alone) or a 3-D one over each depth slice alone (`_planar_pool3d`), without the tails that only plain consumers read (below); a conv alone keeps the
strategy chosen for it in NCHW (the stem's row conv, the 1x1 pixel GEMM), since for it the
layout would only move the same transposing store.

A depthwise conv that reads a conv (through elementwise operators or a max pool) and writes
rows narrower than two vectors keeps its chain (the convs it reads and those that read it)
even where only plain consumers read the chain's end: ShuffleNetV2's branches (1x1,
depthwise 3x3, 1x1) end in a concatenation of 58/116/232 channels and a channel shuffle that
stay NCHW, and in NCHW their depthwise convs vectorize 28/14/7-wide rows through a padded
copy whose lane masks were most of their instructions (OpenVINO runs them NHWC, channels in
the vector). Blocked, each tap is one FMA of a vector of channels, the first 1x1 reads the
plain split, and the last stores NCHW through `layout.from_blocked` in its epilogue; the
stem and max pool before the first stage join through the depthwise conv of its first unit.
A depthwise conv whose input no conv makes (a stage's first unit reading the shuffled image)
keeps NCHW: blocking its input is a transposing copy (`layout.to_blocked`) of the shuffle,
which costs more than the conv gains. Only with vectors of 16 channels (AVX-512): 8 lanes
(AVX2) fill with 28- and 14-wide rows, and there the blocked 1x1 convs of 8-channel blocks
around the depthwise conv, the last storing NCHW, cost the network more than its depthwise
convs and pool gain. A global pool written as a mean over the spatial axes (ReduceMean:
torchvision's ShuffleNetV2 ends `x.mean([2, 3])`) reads the blocked image as
`nn.global_avg_pool` does, and a conv alone whose output only such a mean reads (through
elementwise operators) is blocked from its plain input: in NCHW the mean was a generic
reduction over 7x7 planes that fill no vector, blocked it adds vectors of channels.

Convs that join: float32 2-D convs with
constant weights and static shapes (but the batch and the row width: a 1-D signal's length
exported symbolic, strategy/cpu/width.py), groups 1 or depthwise, on images
larger than 1x1 (a mat-vec stays), not reading a concatenation of other images (DenseNet's convs of growing
concatenations of the block's input and its features share one kernel generic in the
channel count in NCHW, strategy/cpu/generic.py).

1-D convs arrive as 2-D convs of one row and their pools as 2-D pools of the row
(conv_forms.py), so a 1-D CNN (an audio or sensor net) is one chain from its stem to its
global pool, as a 2-D CNN is.

A transpose that puts a chain's channels last (Whisper's stem of two 1-D convs handing the
transformer its (N, W, C) sequence; a hybrid ViT's tokens) reads the blocked image as
it is, each block's vector of channels moved whole behind the spatial axes
(`_blocked_to_last`), and keeps the chain like a global pool does: trimmed, both of
Whisper's convs ran in NCHW, the second storing through a transposing epilogue.

3-D convs (float32, groups 1) join the same way as `nn.conv3d_blocked` over
`(N, C/bn, D, H, W, bn)` images: a video CNN's stem, residual stages and strided 1x1x1
shortcuts run blocked to the global pool (OpenVINO runs them channels-last, NDHWC, to
the same end). In NCDHW the 3-D conv paid a transposing store at every layer and read
its input one channel plane at a time, where the blocked input's taps read a pixel's
vector of channels from one cache line.

On targets with AVX512-VNNI, quantized convs (qnn.conv2d: uint8 data, int8 weights of zero
point 0, groups 1 or depthwise) join as `qnn.conv2d_blocked`, with the quantized
element-wise operators (requantize, the quantized add) between them: a QDQ ResNet-18 runs
blocked from the stem to the global pool, a QDQ MobileNetV2 through its depthwise convs
(strategy/cpu/conv_int8.py).
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from ...te import intrin_x86
from ..ir import Call, Const, Expr, Module, Function
from ..ir.ops_layout import blocks
from ..ir.registry import get_op

# binary operators that commute with relaying out channels
_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
# quantized element-wise operators: images, and scales and zero points per channel or scalar
_QUANT = ("qnn.requantize", "qnn.add", "qnn.quantize", "qnn.dequantize")
# the channels of a block of the integer conv: vpdpbusd's 16 int32 lanes
_QBN = intrin_x86.LANES
# the fill of a constant's padding channels: finite, and neutral where that is defined
_NEUTRAL = {"multiply": 1.0, "divide": 1.0}
# float convs with a blocked form, and its operator
_BLOCKED_CONV = {"nn.conv2d": "nn.conv2d_blocked", "nn.conv3d": "nn.conv3d_blocked"}
# the ranks of the images a chain holds: 2-D and 3-D convs'
_RANKS = (4, 5)
# the vector width (channels) from which a depthwise conv fed by a conv keeps its chain
# blocked when only plain consumers read its end (module docstring)
DEPTHWISE_LANES = 16


def _conv_form(n):
    """Whether conv node `n` has a blocked form, whatever reads its input."""
    if n.op not in _BLOCKED_CONV or not isinstance(n.args[1], Const) or n.type.dtype != "float32":
        return False
    x = n.args[0]
    # a symbolic batch is taken (the blocked convs take it, strategy/cpu/batch.py), and a
    # symbolic row width (a 1-D signal's length: cpu/width.py), any other symbolic size not
    shape = tuple(x.type.shape[1:-1]) + tuple(n.type.shape[1:-1])
    if not all(isinstance(d, int) for d in shape):
        return False
    C = x.type.shape[1]
    g = n.attrs["groups"]
    # a 3-D conv's blocked form has no depthwise kernel
    if not (g == 1 or (g == C and n.type.shape[1] == C and n.op == "nn.conv2d")):
        return False
    return any(d != 1 for d in x.type.shape[2:])


def _qconv_form(n, bn, int8):
    """Whether quantized conv node `n` has a blocked form: on targets with the VNNI conv
    (cpu/conv_int8.py), whose blocks are `bn` (= its 16 lanes) channels; groups 1 or
    depthwise, static shapes, constant weights with zero point 0."""
    if not int8 or bn != _QBN or n.op != "qnn.conv2d":
        return False
    x, w, xz, wz = n.args
    if not all(isinstance(a, Const) for a in (w, xz, wz)) or np.any(wz.data != 0) or x.type.dtype != "uint8":
        return False
    shape = tuple(x.type.shape) + tuple(n.type.shape)
    if len(x.type.shape) != 4 or not all(isinstance(d, int) for d in shape):
        return False
    g, C = n.attrs["groups"], x.type.shape[1]
    return g == 1 or (g == C and n.type.shape[1] == C)


def _convertible_conv(n, bn, int8=False):
    x = n.args[0] if n.args else None
    if isinstance(x, Call) and x.op == "concatenate" and not _blockable_concat(x, bn):
        return False
    return _conv_form(n) or _qconv_form(n, bn, int8)


def _blockable_concat(c, bn):
    """A concatenation along the channels of conv outputs (through elementwise operators;
    squeezenet's fire modules, U-Net's skips), each a whole number of `bn`-channel blocks:
    the blocked images concatenate along their block axis, and the conv reading it stays
    in the chain. One of other images (DenseNet's block input, kept with its dense
    concatenations in NCHW: strategy/cpu/generic.py) is not."""
    if c.op != "concatenate" or len(c.type.shape) != 4 or c.attrs["axis"] % 4 != 1:
        return False
    return all(len(a.type.shape) == 4 and a.type.shape[1] % bn == 0 and _made_by_conv(a)
               for a in c.args)


def _made_by_conv(e):
    """Whether image `e` is a conv's output (a quantized one's too), through elementwise
    operators."""
    stack, seen = [e], set()
    while stack:
        e = stack.pop()
        if e in seen or not isinstance(e, Call):
            continue
        seen.add(e)
        if _conv_form(e) or e.op == "qnn.conv2d":
            return True
        stack.extend(_image_args(e))
    return False


def _planar_pool3d(n):
    """Whether `n` is a 3-D max pool over each depth slice alone (a window and stride of one
    along the depth, no depth padding: C3D's and I3D's first pools, (1, 2, 2) and (1, 3, 3))
    with static sizes: on the blocked image, depth slices folded into the block axis, it is
    the 2-D pool's blocked form."""
    if n.op != "nn.max_pool3d" or not all(isinstance(d, int) for d in n.type.shape):
        return False
    a = n.attrs
    return a["pool_size"][0] == 1 and a["strides"][0] == 1 and a["padding"][0] == a["padding"][3] == 0


def _unary(n):
    # a cast too: the integer convs computed in float (int8_float.py) cast their sums to
    # int32 and the next conv's input to float32 inside the chain
    return len(n.args) == 1 and get_op(n.op).kind == "elemwise" and \
        (n.type.dtype == n.args[0].type.dtype or n.op == "cast")


def _image_args(n):
    """The operands of elementwise node `n` that are images of its own shape."""
    if _unary(n):
        return list(n.args)
    if n.op in _BINARY + _QUANT and len(n.type.shape) in _RANKS:
        return [a for a in n.args if tuple(a.type.shape) == tuple(n.type.shape)]
    if n.op == "qnn.lut":
        return [n.args[0]]
    if n.op == "nn.bias_add" and n.attrs.get("axis") == 1 and len(n.type.shape) in _RANKS:
        return [n.args[0]]
    return []


def _chains(fn, bn, int8):
    """The convs that are in a chain (module docstring): a conv that reads, through
    elementwise operators only, another such conv's output, and the convs it reads, less
    the chains' tails whose output only goes to plain consumers (a concatenation, a
    transpose other than to channels last), repeatedly: such a conv would only unpack its
    blocked input's producer into its own kernel, where its NCHW strategies (rows, 1x1
    pixel GEMM) do better. A tail read by a global pool or a transpose to channels last
    (`_reaches_reader`) stays, and so does a depthwise conv that reads a conv, with the
    convs it reads and those that read it."""
    users: Dict[Expr, list] = {}
    for n in fn.nodes():
        for a in n.args:
            users.setdefault(a, []).append(n)
    feeds: Dict[Call, set] = {}      # conv -> the convs that read it
    convs = {}
    for n in fn.nodes():
        if not _convertible_conv(n, bn, int8):
            continue
        stack, seen = [n.args[0]], set()
        while stack:
            e = stack.pop()
            if e in seen or not isinstance(e, Call):
                continue
            seen.add(e)
            if _convertible_conv(e, bn, int8):
                feeds.setdefault(e, set()).add(n)
                convs[e], convs[n] = e, n
            elif _blockable_concat(e, bn) or e.op == "nn.max_pool2d" or _planar_pool3d(e):
                stack.extend(e.args)
            else:
                stack.extend(_image_args(e))
    chained = set(convs)
    # an integer conv is never a tail: in NCHW its epilogue would gather each channel's row
    # out of the accumulators all the same (cpu/conv_int8.py), and its input be packed again
    lasts = {s[0] for s in map(_last_transpose, fn.nodes()) if s}
    pooled = {i for i, c in convs.items() if c.op == "qnn.conv2d" or _reaches_reader(c, users, bn, lasts)}
    # a depthwise conv fed by a conv keeps its chain where vectors are wide (module
    # docstring: shufflenet)
    read = set().union(*feeds.values()) if feeds else set()
    dw = {i for i in convs if _depthwise(i) and i in read and _narrow_rows(i, bn)} if bn >= DEPTHWISE_LANES else set()
    pooled |= dw | {i for i in convs if feeds.get(i, set()) & dw} | {j for d in dw for j in feeds.get(d, ())}
    # a conv alone whose output a spatial mean reads (shufflenet's last conv): the mean
    # sums the blocked image's vectors of channels, where in NCHW, a ReduceMean and no
    # global pool, it is a generic reduction over 7x7 planes that fill no vector
    lone = {n for n in fn.nodes() if n not in convs and n.op == "nn.conv2d" and n.attrs["groups"] == 1
            and _convertible_conv(n, bn, int8) and _reaches_reader(n, users, bn, lasts, means_only=True)}
    while True:
        tails = {i for i in chained if i not in pooled and not (feeds.get(i, set()) & chained)}
        # a conv stays while it reads a chained conv or feeds one
        keep = {i for i in chained - tails
                if feeds.get(i, set()) & (chained - tails) or any(i in feeds.get(j, ()) for j in chained - tails)}
        if keep == chained:
            return chained | lone
        chained = keep


def _spatial_mean(n):
    """Whether node `n` is a global average pool written as a mean over the spatial axes
    of a 2-D image (torchvision's `x.mean([2, 3])`, a ReduceMean)."""
    return n.op == "mean" and len(n.args[0].type.shape) == 4 and \
        sorted(a % 4 for a in (n.attrs.get("axis") or [])) == [2, 3]


def _depthwise(n):
    """Whether conv node `n` is depthwise (one group per input channel)."""
    g = n.attrs.get("groups", 1)
    return g != 1 and g == n.args[0].type.shape[1]


def _narrow_rows(n, bn):
    """Whether conv node `n`'s output rows are a static width under two vectors of `bn`
    lanes: in NCHW their vectors are partly masked (a 28-wide row is 1.75 vectors of 16)."""
    w = n.type.shape[-1]
    return isinstance(w, int) and w < 2 * bn


def _reaches_reader(conv, users, bn, lasts, means_only=False):
    """Whether the conv's output reaches, through elementwise operators, a reader of the
    blocked image: a global average pool (reads it as it is) or a transpose that puts its
    channels last (one of `lasts`' images; reads its blocks as they are, `_blocked_to_last`);
    with `means_only`, a global pool written as a spatial mean only."""
    stack, seen = [conv], set()
    while stack:
        e = stack.pop()
        if e in lasts and not means_only:
            return True
        for u in users.get(e, []):
            if u in seen:
                continue
            seen.add(u)
            # (a quantized network's integer pool reads the relaid-out 7x7 image: a tiny copy)
            if _spatial_mean(u) or (u.op in ("nn.global_avg_pool", "qnn.global_avg_pool") and not means_only):
                return True
            if any(a is e for a in _image_args(u)) and not _convertible_conv(u, bn):
                stack.append(u)
    return False


def _last_transpose(t):
    """(the image, the spatial shape it is read with) when node `t` transposes an image's
    channels last with its other axes in order, straight or through a reshape of its
    spatial axes alone (a 1-D conv's row (N, C, 1, W) read as (N, C, W)): a conv stem
    handing a transformer its (N, W, C) sequence (Whisper's, a ViT's patches). Else None."""
    if t.op != "transpose" or not isinstance(t.args[0], Call):
        return None
    x, r = t.args[0], len(t.type.shape)
    if list(t.attrs["axes"]) != [0, *range(2, r), 1]:
        return None
    sp = tuple(x.type.shape[2:])
    if x.op == "reshape" and isinstance(x.args[0], Call) and \
            tuple(x.args[0].type.shape[:2]) == tuple(x.type.shape[:2]):
        x = x.args[0]
    return (x, sp) if len(x.type.shape) in _RANKS else None


def _blocked_to_last(xb, sp, C, span):
    """The (N, *sp, C) image of blocked image `xb` (N, C/bn, *S, bn): its blocks moved
    behind the spatial axes, which leaves each block's `bn` channels where they are (a copy
    of whole vectors, where converting to NCHW first and transposing then moved every
    channel twice), and the padding channels cut off."""
    N, CB, *S, bn = xb.type.shape
    k = len(S)
    y = Call("transpose", [xb], {"axes": [0, *range(2, 2 + k), 1, 2 + k]}, span)
    y = Call("reshape", [y], {"newshape": [N, *sp, CB * bn]}, span)
    if CB * bn == C:
        return y
    r = len(sp) + 2
    return Call("strided_slice", [y], {"begin": [0] * r, "end": [N, *sp, C], "strides": [1] * r}, span)


def _channel_const(c: Const, C, bn, fill, nd=2):
    """A constant broadcast along the channels of an NCHW (nd = 3: NCDHW) image, for the
    blocked image; None when it is not one (per-channel (C, 1, 1) / (1, C, 1, 1), or a
    single value)."""
    d = c.data
    if d.size == 1:
        return Const(d.reshape(()))
    shape = d.shape
    if len(shape) > nd + 2 or len(shape) < nd + 1 or shape[-nd - 1] != C or any(s != 1 for s in shape[-nd:]) \
            or (len(shape) == nd + 2 and shape[0] != 1):
        return None
    v = np.full(blocks(C, bn) * bn, fill, d.dtype)
    v[:C] = d.reshape(C)
    return Const(v.reshape((blocks(C, bn),) + (1,) * nd + (bn,)))


def blocked_layout(mod: Module, bn: int, int8: bool = False) -> Module:
    """The module with its conv chains blocked by `bn` channels (a vector of the target);
    with `int8` (a target with the VNNI conv), quantized convs join them."""
    fn = mod.main
    if any(isinstance(n.op, Function) for n in fn.nodes()):
        return mod
    chained = _chains(fn, bn, int8)
    if not chained:
        return mod
    blocked: Dict[Expr, Call] = {}
    plain: Dict[Expr, object] = {}

    def get_plain(e):
        if e in plain:
            return plain[e]
        if e in blocked:
            plain[e] = _from_blocked(blocked[e], e.type.shape[1], bn)
            return plain[e]
        return e

    def get_blocked(e):
        if e not in blocked:
            x = get_plain(e)
            shape = tuple(e.type.shape)
            if all(d == 1 for d in shape[2:]) and shape[1] % bn == 0:    # the same bytes: a view
                blocked[e] = Call("reshape", [x], {"newshape": [shape[0], shape[1] // bn, *shape[2:], bn]})
            else:
                blocked[e] = Call("layout.to_blocked", [x], {"bn": bn})
        return blocked[e]

    for n in fn.nodes():
        if (n.op == "nn.global_avg_pool" or _spatial_mean(n)) and n.args[0] in blocked:
            # squeeze-excite's squeeze: the mean of the blocked image, relaid out when tiny
            shape = n.args[0].type.shape
            sp = list(range(2, len(shape)))
            m = Call("mean", [blocked[n.args[0]]], {"axis": sp, "keepdims": True}, n.span)
            plain[n] = _from_blocked(m, shape[1], bn)
            if len(n.type.shape) == 2:      # ReduceMean's (N, C), shufflenet's
                plain[n] = Call("reshape", [plain[n]], {"newshape": list(n.type.shape)}, n.span)
            continue
        last = _last_transpose(n)
        if last and last[0] in blocked:
            plain[n] = _blocked_to_last(blocked[last[0]], last[1], n.type.shape[-1], n.span)
            continue
        y = _blocked_node(n, chained, blocked, get_plain, get_blocked, bn)
        if y is not None:
            blocked[n] = y
        else:
            args = [get_plain(a) for a in n.args]
            plain[n] = n if all(a is b for a, b in zip(args, n.args)) else Call(n.op, args, n.attrs, n.span)
    outs = [get_plain(o) for o in fn.outputs]
    return Module(Function(fn.name, fn.params, outs, fn.attrs), mod.info)


def _from_blocked(xb, C, bn):
    shape = xb.type.shape
    if all(d == 1 for d in shape[2:-1]) and C % bn == 0:      # (N, C/bn, 1, 1, bn): NCHW's bytes
        return Call("reshape", [xb], {"newshape": [shape[0], C, *shape[2:-1]]})
    return Call("layout.from_blocked", [xb], {"bn": bn, "channels": C})


def _blocked_node(n, chained, blocked, get_plain, get_blocked, bn):
    """The blocked form of node `n`, or None where it stays plain."""
    if n in chained and n.op == "qnn.conv2d":
        x = n.args[0]
        inb = x in blocked or n.attrs["groups"] != 1
        return Call("qnn.conv2d_blocked", [get_blocked(x) if inb else get_plain(x)] + list(n.args[1:]),
                    dict(n.attrs, bn=bn, in_blocked=inb), n.span)
    if n in chained:
        x, w = n.args
        a = dict(n.attrs, bn=bn)
        op = _BLOCKED_CONV[n.op]
        if x in blocked or n.attrs["groups"] != 1:
            return Call(op, [get_blocked(x), w], dict(a, in_blocked=True), n.span)
        return Call(op, [get_plain(x), w], dict(a, in_blocked=False), n.span)
    if not any(a in blocked for a in n.args) or len(n.type.shape) not in _RANKS:
        return None
    if n.op == "concatenate":
        if not (_blockable_concat(n, bn) and all(a in blocked for a in n.args)):
            return None
        return Call("concatenate", [blocked[a] for a in n.args], {"axis": 1}, n.span)
    if n.op == "nn.max_pool2d" or _planar_pool3d(n):
        # a 3-D pool whose last window is one element: each lane of a block pools alone; a
        # 3-D image's depth slices are folded into the block axis (a view) around it
        a, x = n.attrs, blocked[n.args[0]]
        k, st, dl = (list(a[key][-2:]) for key in ("pool_size", "strides", "dilation"))
        p = list(a["padding"])
        if n.op == "nn.max_pool3d":     # (rows, columns) of (depth, rows, columns)
            p = p[1:3] + p[4:6]
            N, CB, D, H, W, _ = x.type.shape
            x = Call("reshape", [x], {"newshape": [N, CB * D, H, W, bn]}, n.span)
        y = Call("nn.max_pool3d", [x],
                 {"pool_size": k + [1], "strides": st + [1], "padding": p[:2] + [0] + p[2:] + [0],
                  "dilation": dl + [1], "ceil_mode": a["ceil_mode"]}, n.span)
        if n.op == "nn.max_pool3d":
            y = Call("reshape", [y], {"newshape": [N, CB, *n.type.shape[2:], bn]}, n.span)
        return y
    C, nd = n.type.shape[1], len(n.type.shape) - 2
    if _unary(n):
        return Call(n.op, [blocked[n.args[0]]], n.attrs, n.span)
    if n.op == "qnn.lut":       # a table of the 256 values: the same for every channel
        return Call(n.op, [blocked[n.args[0]], n.args[1]], n.attrs, n.span)
    if n.op == "nn.bias_add" and n.attrs.get("axis") == 1 and isinstance(n.args[1], Const):
        b = _channel_const(Const(n.args[1].data.reshape((C,) + (1,) * nd)), C, bn, 0.0, nd)
        return Call("add", [blocked[n.args[0]], b], {}, n.span)
    if n.op not in _BINARY + _QUANT:
        return None
    args = []
    for a in n.args:
        if a in blocked:
            args.append(blocked[a])
        elif isinstance(a, Const):
            c = _channel_const(a, C, bn, _NEUTRAL.get(n.op, 0.0), nd)
            if c is None:
                return None
            args.append(c)
        elif tuple(a.type.shape) == (n.type.shape[0], C) + (1,) * nd:
            args.append(get_blocked(a))     # a squeeze-excite gate: a tiny relayout
        else:
            return None                     # a plain image: the op runs on plain images
    return Call(n.op, args, n.attrs, n.span)
