"""Graph operators that only backward passes use (`graph.gradient`, graph/autodiff/): the
adjoints that no forward operator computes. Their tensor expressions are in
strategy/topi_grad.py."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .ops_index import window_positions
from .ops_nn import pool_out_type
from .registry import FLOATS, check_nargs, register


def _max_pool_grad_infer(types, attrs):
    check_nargs(types, 2)
    x, dy = types
    nd = x.ndim - 2
    if nd < 1:
        raise GraphError(f"input {x} needs rank >= 3")
    if x.dtype not in FLOATS:
        raise GraphError(f"needs a floating-point input, got {x.dtype}")
    if dy != pool_out_type(x, attrs, nd):
        raise GraphError(f"output adjoint {dy} does not fit the pooling of {x}")
    return x


def _max_pool_grad_ref(x, dy, a):
    # each window's adjoint goes to its first maximum in row-major window order, as torch's
    # and onnxruntime's argmax pick it
    nd = x.ndim - 2
    k, s, p, dl = a["pool_size"], a["strides"], a["padding"], a["dilation"]
    out = np.zeros(x.shape, np.float64)
    for n, ch in np.ndindex(*x.shape[:2]):
        for oi in np.ndindex(*dy.shape[2:]):
            best, where = -np.inf, None
            for ki in np.ndindex(*k):
                pos = window_positions(oi, ki, s, p, dl)
                if all(0 <= pos[d] < x.shape[2 + d] for d in range(nd)):
                    v = x[(n, ch) + tuple(pos)]
                    if where is None or v > best:
                        best, where = v, tuple(pos)
            if where is not None:
                out[(n, ch) + where] += dy[(n, ch) + oi]
    return out.astype(x.dtype)


register("nn.max_pool_grad", "opaque", _max_pool_grad_infer, _max_pool_grad_ref,
         {"pool_size": [1], "strides": [1], "padding": [0, 0], "dilation": [1], "ceil_mode": False})
