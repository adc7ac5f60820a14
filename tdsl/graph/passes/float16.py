"""float16 networks compute in float32 and store float16 (`float16_in_float32`).

CPUs without AVX512-FP16 have no float16 arithmetic: each float16 operation is done in
float32 and rounded back anyway. What matters is where sums are rounded. A float16
convolution, matrix product, softmax or mean written in float16 rounds its running sum at
every step, so a long dot product ends ulps away from the float32 sum rounded once;
onnxruntime's CPU provider instead computes such a node in float32 and rounds its output
once. This pass does the same: every accumulating operator (the anchor, reduce and opaque
kinds) whose output is float16 gets its float16 operands widened to float32 and its result
narrowed back, `cast(op(cast(x, float32), ...), float16)`. Constant weights are widened
once at build time by `fold_constants`. Elementwise operators stay float16 (rounded after
each operation, as onnxruntime rounds after each node); operators that only select values
(max pooling, max, min, arg max) are exact either way and are left alone.

The values are float16 wherever onnxruntime's are; the memory is float16 except where a
narrowing cast is followed by a widening one: fusion puts the widening cast into the
producer's kernel, so a tensor read only by float32 kernels is stored in float32 holding
float16 values, and those kernels (the float32 conv and dense schedules) read it directly.
"""
from __future__ import annotations

from ..ir import Call
from ..ir.registry import OPS
from .rewrite import rewrite, same

_EXACT = {"nn.max_pool1d", "nn.max_pool2d", "nn.max_pool3d", "max", "min", "argmax", "argmin",
          "topk_indices", "nn.max_pool_indices"}
_KINDS = ("anchor", "reduce", "opaque")


def _widens(n: Call) -> bool:
    if not isinstance(n.op, str) or n.op in _EXACT or n.type.dtype != "float16":
        return False
    op = OPS.get(n.op)
    return op is not None and op.kind in _KINDS and \
        any(a.type.dtype == "float16" for a in n.args)


def float16_in_float32(mod):
    def visit(n, args):
        if not _widens(n):
            return same(n, args)
        wide = [Call("cast", [a], {"dtype": "float32"}, n.span) if a.type.dtype == "float16"
                else a for a in args]
        return Call("cast", [Call(n.op, wide, n.attrs, n.span)], {"dtype": "float16"}, n.span)
    return rewrite(mod, visit)
