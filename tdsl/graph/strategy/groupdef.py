"""The definition of a fused group: its operators as tdsl tensors (`GroupDef.build`), the
fast CPU definitions where they apply, the GPU's column-GEMM conv where it applies,
`topi.TE` otherwise."""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

import tdsl

from ...errors import GraphError
from ...target import as_target
from ..ir import Function, Var
from . import erasure, topi, topi_index, topi_layout, topi_nn, topi_quant  # noqa: F401  (the families add their definitions to topi.TE)
from .cpu import conv_grouped, conv_int8, matmul_int8, pool, squeeze
from .cpu.anchors import conv_blocked_fast, conv_fast, dense_fast, depthwise_strided_fast
from .gpu import conv_gemm


# ---------------------------------------------------------------------------- definition

CONV_FAST = ("nn.conv2d", "nn.conv3d", "nn.conv2d_transpose", "nn.conv3d_transpose")

DERIVED = 1 << 16      # slots of derived params: DERIVED * tag + the source param's index


def derived_source(slot):
    """The group param a kernel parameter slot reads (itself unless derived)."""
    return slot % DERIVED


class GroupDef:
    """Builds the te graph of a group; anchors may ask for re-laid-out constant params."""

    def __init__(self, fn: Function, consts: Dict[int, np.ndarray], target, family="cpu"):
        self.fn = fn
        self.consts = consts
        self.target = as_target(target)
        self.kind = self.target.kind
        self.family = family       # "cpu": the fast definitions below; "gpu": topi's
        self.pidx = {id(p): i for i, p in enumerate(fn.params)}
        self.placeholders: Dict[int, object] = {}
        self.transforms: Dict[int, Callable] = {}
        self.anchor = None        # (tensor, info)
        self.use_auto = True      # groups without a hand strategy: tdsl.autosched's rules
        self.auto_params = None   # their parameters, when tuned (tune_group)
        self.explanation = None
        self.channel_scale = None  # set while a conv of a channel-scaled input is defined
        self.erasure = None        # a kernel generic in the channel count (cpu/generic.py)
        self.size_var = erasure.size_var()

    def param_tensor(self, i):
        if i not in self.placeholders:
            p = self.fn.params[i]
            shape = p.type.shape if self.erasure is None else \
                self.erasure.shape(i, p.type.shape, self.size_var)
            self.placeholders[i] = tdsl.placeholder(shape, p.type.dtype, name=f"p{i}")
        return self.placeholders[i]

    def operand(self, e, tensors):
        """The tensor of expression `e` inside the group: a node defined before (`tensors`,
        by id), else the placeholder of the group parameter it is."""
        return tensors[id(e)] if id(e) in tensors else self.param_tensor(self.pidx[id(e)])

    def const_param(self, e):
        """Index of the group parameter `e` if it is bound to a constant."""
        if isinstance(e, Var) and id(e) in self.pidx and self.pidx[id(e)] in self.consts:
            return self.pidx[id(e)]
        return None

    def packed_param(self, i, shape, transform):
        """The placeholder of constant param i re-laid out by `transform` (input channels on
        axis 1), times the channel scale of the conv being defined if it has one."""
        self.transforms[i] = transform
        t = tdsl.placeholder(shape, self.fn.params[i].type.dtype, name=f"p{i}_packed")
        self.placeholders[i] = t
        sc = self.channel_scale
        if sc is None:
            return t
        if len(sc.shape) == 5:      # a blocked image's scale: input channel (k[1], k[-2])
            ws = tdsl.compute(shape, lambda *k: t[k] * sc[0, k[1], 0, 0, k[-2]], name=topi.uname("scaled_weights"))
        else:
            ws = tdsl.compute(shape, lambda *k: t[k] * sc[0, k[1], 0, 0], name=topi.uname("scaled_weights"))
        ws.op._graph_root = True      # computed once per call, never inlined into the conv
        return ws

    def derived_param(self, i, tag, shape, dtype, transform):
        """A placeholder bound to `transform(constant param i)`, computed once at build
        time like a packed param (e.g. a per-channel sum of weights), beside param i's own;
        `tag` (1, 2, ...) tells several apart. Its slot in the kernel's parameter order is
        DERIVED * tag + i (the executor reads `derived_source`)."""
        slot = DERIVED * tag + i
        self.transforms[slot] = transform
        t = tdsl.placeholder(shape, dtype, name=f"p{i}_derived{tag}")
        self.placeholders[slot] = t
        return t

    def build(self):
        topi.reset_names()
        env = {}
        for i, p in enumerate(self.fn.params):
            env[id(p)] = i
        tensors = {}
        fast = self.family == "cpu" and self.target.family == "cpu"
        for n in self.fn.nodes():
            ins = []
            for a in n.args:
                if id(a) in tensors:
                    ins.append(tensors[id(a)])
            out_t = None
            if fast and n.op in CONV_FAST:
                out_t = conv_fast(self, n, tensors)
            elif fast and n.op in ("qnn.conv2d", "qnn.conv2d_blocked"):
                out_t = conv_int8.qconv2d(self, n, tensors)
            elif fast and n.op == "nn.conv2d_blocked":
                out_t = conv_blocked_fast(self, n, tensors)
            elif fast and n.op == "qnn.matmul":
                out_t = matmul_int8.qmatmul(self, n)
            elif fast and n.op == "nn.dense":
                out_t = dense_fast(self, n)
            if out_t is None and fast and n.op in ("nn.conv2d", "qnn.conv2d"):
                out_t = conv_grouped.grouped_conv2d(self, n, tensors)
            if out_t is None and fast and n.op == "nn.conv2d":
                out_t = depthwise_strided_fast(self, n, tensors)
            if out_t is None and fast and n.op in ("nn.max_pool2d", "nn.avg_pool2d"):
                out_t = pool.pool2d_sep(self, n, self.operand(n.args[0], tensors), n.op[3:6])
            if out_t is None and fast and squeeze.applies_blocked_pool(n) and id(n.args[0]) in self.pidx:
                out_t = squeeze.global_avg_pool_blocked(self, n, self.param_tensor(self.pidx[id(n.args[0])]))
            if out_t is None and fast and n.op == "nn.global_avg_pool" and n.type.dtype == "float32" \
                    and len(n.type.shape) == 4 and id(n.args[0]) in self.pidx:
                out_t = squeeze.global_avg_pool_fast(self, n, self.param_tensor(self.pidx[id(n.args[0])]))
            if out_t is None and self.family == "gpu" and n.op == "nn.conv2d":
                out_t = conv_gemm.conv2d(self, n, tensors)
            if out_t is None:
                args = [self.operand(a, tensors) for a in n.args]
                out_type = erasure.node_type(self.erasure, n, self.size_var)
                try:
                    out_t = topi.TE[n.op](args, n.attrs, out_type)
                except KeyError:
                    raise GraphError(f"no tensor-expression definition for operator '{n.op}'") from None
            tensors[id(n)] = out_t
        out = tensors[id(self.fn.outputs[0])]
        return out
