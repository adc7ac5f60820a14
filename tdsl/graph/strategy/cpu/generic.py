"""Kernels generic in a group's channel count: one build serves every group that differs
from another only in it.

DenseNet-121 applies BatchNorm+ReLU and then a 1x1 conv to the concatenation of all its
feature maps so far: 116 groups that differ only in their number of channels C, and so
116 kernels to build, each through LLVM's pipeline and tdsl's lowering. A group
whose code does not depend on C is built once with C a size variable, bound at call time
from the arguments' shapes like any symbolic size of `tdsl.build` (a group with symbolic
sizes, a batch, takes C beside them: one kernel generic in both):

* an elementwise chain over an NCHW image, per-channel constants broadcast along it
  (BatchNorm at inference, activations, residual adds);
* a conv whose definition is the 1x1 or the blocked NCHW[x]c one, reading a group input:
  generic in its input channels (the reduction's length, a stride of the packed weights),
  any epilogue on its output;
* a global average pool (squeeze-excite's squeeze).

With symbolic sizes, only a symbolic batch: every other size is a number.

What a strategy derives from C (the conv definition, whether a loop is worth threads) is
derived for the group built first; the conv definition is part of the key, so groups that
share a kernel chose the same one. Packed weights are packed per call from their own shape.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ....target import as_target
from ...ir import Const, Function, Var
from ...ir.text import print_function
from ..erasure import OUTPUT_HAS_C, SIZE_NAME, Erasure, c_axis
from ..groupdef import GroupDef
from ..topi import BINARY_EXPR, UNARY_EXPR
from .conv_choice import conv_path


def _elementwise_ops():
    return set(UNARY_EXPR) | set(BINARY_EXPR)


def find(fn: Function, consts: Dict[int, np.ndarray], target) -> Optional[Erasure]:
    """How group `fn` (constants `consts` by parameter index) can be built generic in its
    channel count, or None."""
    if as_target(target).kind != "llvm" or len(fn.outputs) != 1 or isinstance(fn.outputs[0], (Const, Var)):
        return None
    if not _only_batch_symbolic(fn):
        return None
    nodes = list(fn.nodes())
    if nodes and nodes[0].op == "nn.conv2d":
        return _conv(fn, nodes, consts, target)
    if [n.op for n in nodes] == ["nn.global_avg_pool"]:
        return _global_pool(fn, nodes[0], consts)
    return _elementwise(fn, nodes)


def _only_batch_symbolic(fn):
    """Whether every size of the group's images but their batch (axis 0) is a number, and
    every size of its other tensors: C must be one, and a kernel generic in C has none of
    the size-class variants (dispatch.compile_group) that another symbolic size (a
    sequence, an image's width) may call for."""
    types = [p.type for p in fn.params] + [n.type for n in fn.nodes()]
    return all(isinstance(d, (int, np.integer)) for t in types for d in (t.shape[1:] if t.ndim == 4 else t.shape))


def _elementwise(fn, nodes):
    out = fn.outputs[0].type
    ops = _elementwise_ops()
    if len(out.shape) != 4 or out.shape[1] <= 1 or not all(n.op in ops and n.type.ndim <= 4 for n in nodes):
        return None
    C = out.shape[1]
    params = []
    for i, p in enumerate(fn.params):
        a = c_axis(p.type)
        if a is not None and p.type.shape[a] == C:
            params.append((i, a))
    return Erasure(C, tuple(params), "elementwise") if params else None


def _global_pool(fn, pool, consts):
    x = pool.args[0]
    if not isinstance(x, Var) or x.type.dtype != "float32" or x.type.ndim != 4:
        return None
    i = fn.params.index(x)
    return None if i in consts else Erasure(x.type.shape[1], ((i, 1),), "global_pool")


def _conv(fn, nodes, consts, target):
    conv = nodes[0]
    x, w = conv.args
    pidx = {p: i for i, p in enumerate(fn.params)}
    if x not in pidx or w not in pidx or pidx[x] in consts or pidx[w] not in consts:
        return None
    if conv.attrs["groups"] != 1 or x.type.dtype != "float32" or x.type.ndim != 4:
        return None
    # the image and the weights feed the conv alone: no other node sees their C
    if any(a is x or a is w for n in nodes[1:] for a in n.args) or any(o is x or o is w for o in fn.outputs):
        return None
    path = conv_path(GroupDef(fn, consts, target), conv)
    if path not in ("1x1", "blocked"):
        return None
    return Erasure(x.type.shape[1], ((pidx[x], 1), (pidx[w], 1)), path)


def key_text(fn: Function, e: Erasure) -> str:
    """The group's text with the size C of the erased axes written as `C`: the same for
    every group that can share the kernel."""
    var = SIZE_NAME

    def fmt(shape, dtype):
        return f"Tensor[({', '.join(map(str, shape))}), {dtype}]"
    params = ", ".join(f"%{p.name}: {fmt(e.shape(i, p.type.shape, var), p.type.dtype)}"
                       for i, p in enumerate(fn.params))
    out = fn.outputs[0].type
    ret = tuple(var if e.kind in OUTPUT_HAS_C and k == 1 else s for k, s in enumerate(out.shape))
    body = print_function(fn).split("\n", 1)[1]
    attrs = "".join(f" {k}={v!r}" for k, v in sorted(fn.attrs.items()))
    return f"generic {e.kind}({params}) -> {fmt(ret, out.dtype)}{attrs}\n{body}"
