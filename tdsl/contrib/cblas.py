"""`cblas.matmul(A, B)`: TVM's `tvm.contrib.cblas.matmul`, a `tdsl.extern` stage whose
call is the shipped function "tvm.contrib.cblas.matmul" (BLAS sgemm/dgemm, found by
`tdsl.runtime.blas`)."""
from __future__ import annotations

from ..errors import TdslError
from ..te.extern import call_packed, extern


def matmul(lhs, rhs, transa=False, transb=False, name="C"):
    """C = op(lhs) @ op(rhs), op transposing when `transa` / `transb`; float32 or float64."""
    if len(lhs.shape) != 2 or len(rhs.shape) != 2:
        raise TdslError(f"cblas.matmul: needs 2-d tensors, got {lhs.shape} and {rhs.shape}")
    n = lhs.shape[1] if transa else lhs.shape[0]
    m = rhs.shape[0] if transb else rhs.shape[1]
    return extern((n, m), [lhs, rhs],
                  lambda ins, outs: call_packed("tvm.contrib.cblas.matmul", ins[0], ins[1],
                                                outs[0], transa, transb),
                  name=name, dtype=lhs.dtype)
