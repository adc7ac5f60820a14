"""The CUDA tensor intrinsics tdsl ships: the tensor-core `mma.sync.aligned.m16n8k16` of
sm_80 and later, 16 x 8 float32 outputs += a 16 x 16 block of A (bfloat16 or float16) times
a 16 x 8 block of B, computed by the 32 lanes of a warp together.

The intrinsic is `warp` (every lane makes the call; each loads and stores its own fragment,
so the blocks live in memory a whole warp can read: shared memory, or global) and `strided`
(the blocks are tiles of larger buffers; their row steps become the call's leading
dimensions). The code is the source printers' (`tdsl.codegen.source.tensor_ops`): the
instruction in CUDA, its meaning lane by lane for the "c" target's emulation of GPU kernels.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import expr as E
from .compute import compute, placeholder, reduce_axis, sum as _sum
from .tensor_intrin import call, decl_tensor_intrin

M, N, K = 16, 8, 16
DTYPES = {"bfloat16": "bf16", "float16": "f16"}


def _row_step(region, what):
    if region.strides is None or not E.is_const_int(region.strides[1], 1):
        raise ScheduleError(f"mma_m16n8k16: the {what} block must have contiguous rows, has "
                            f"steps {region.strides}")
    return region.strides[0]


def mma_m16n8k16(dtype="bfloat16"):
    """C[i, j] += sum_k float(A[i, k]) * float(B[k, j]) over a 16 x 8 x 16 block (A row-major
    16 x 16, B row-major 16 x 8, C float32 16 x 8), one `mma.sync` of a warp."""
    if dtype not in DTYPES:
        raise ScheduleError(f"mma_m16n8k16: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    A = placeholder((M, K), dtype=dtype, name="A")
    B = placeholder((K, N), dtype=dtype, name="B")
    k = reduce_axis((0, K), name="k")
    C = compute((M, N), lambda i, j: _sum(A[i, k].astype("float32") * B[k, j].astype("float32"),
                                          axis=k), name=f"mma_m16n8k16_{DTYPES[dtype]}")

    def fimpl(ins, outs):
        a, b = ins
        c = outs[0]
        return call(f"cuda.mma_m16n8k16.{DTYPES[dtype]}", c.access_ptr("rw"), a.access_ptr(),
                    b.access_ptr(), _row_step(c, "C"), _row_step(a, "A"), _row_step(b, "B"))

    return decl_tensor_intrin(C.op, fimpl, inputs=[A, B], strided=True, warp=True)
