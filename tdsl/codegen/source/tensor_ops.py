"""The machine operations tensor intrinsics call (`tdsl.te.tensor_intrin.call`), for the
C-family printers: each is a helper function emitted once per translation unit and called
on the pointers `Region.access_ptr()` gives.

`cuda.mma_m16n8k16.{bf16,f16}` (`tdsl.intrin_cuda.mma_m16n8k16` with C in memory) is a
warp's tensor-core `mma.sync` in CUDA, loading and storing the lane's elements of C around
it. For the "c" target's emulation of GPU kernels (threads as fibers, no warps) it is what
the instruction means for the calling lane: the lane's four elements of C get their dot
products with plain loops. The calls on accumulators held in registers (fill, mma, store)
are `mma_fragments.py`'s; there the emulation follows the register layout in all three, so
a disagreement between them shows in the numbers, though the instruction itself (and
ldmatrix) only a GPU can check.
"""
from __future__ import annotations

from ...errors import BuildError
from . import mma_fragments
from .mma_fragments import LAYOUT, PACK

_CUDA = r"""
// {comment}
static __device__ __forceinline__ void {name}(float *c, const {t} *a_, const {t} *b_,
                                             int ldc, int lda, int ldb) {{
  const unsigned short *a = (const unsigned short *)a_, *b = (const unsigned short *)b_;
  const int lane = {lane} & 31, g = lane >> 2, t = lane & 3;
  const unsigned a01 = tdsl_mma_pack(&a[g * lda + 2 * t], &a[g * lda + 2 * t + 1]);
  const unsigned a23 = tdsl_mma_pack(&a[(g + 8) * lda + 2 * t], &a[(g + 8) * lda + 2 * t + 1]);
  const unsigned a45 = tdsl_mma_pack(&a[g * lda + 2 * t + 8], &a[g * lda + 2 * t + 9]);
  const unsigned a67 = tdsl_mma_pack(&a[(g + 8) * lda + 2 * t + 8],
                                     &a[(g + 8) * lda + 2 * t + 9]);
  const unsigned b01 = tdsl_mma_pack(&b[(2 * t) * ldb + g], &b[(2 * t + 1) * ldb + g]);
  const unsigned b23 = tdsl_mma_pack(&b[(2 * t + 8) * ldb + g], &b[(2 * t + 9) * ldb + g]);
  float *top = c + g * ldc + 2 * t, *bottom = c + (g + 8) * ldc + 2 * t;
  float c0 = top[0], c1 = top[1], c2 = bottom[0], c3 = bottom[1];
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 "
               "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a01), "r"(a23), "r"(a45), "r"(a67), "r"(b01), "r"(b23));
  top[0] = c0; top[1] = c1; bottom[0] = c2; bottom[1] = c3;
}}
"""

_EMULATED = r"""
/* {name}: what mma.sync computes for this lane: its elements of C (c0..c3 of the layout
   of PTX ISA 9.7.14.5.8), each += its row of A times its column of B. */
static inline void {name}(float *c, const {t} *a, const {t} *b, int ldc, int lda, int ldb) {{
  const int lane = {lane} & 31, g = lane >> 2, t = lane & 3;
  for (int r = 0; r < 4; ++r) {{
    const int i = g + 8 * (r >> 1), j = 2 * t + (r & 1);
    float acc = c[i * ldc + j];
    for (int k = 0; k < 16; ++k)
      acc += {a_ik} * {b_kj};
    c[i * ldc + j] = acc;
  }}
}}
"""

_DTYPE = {"bf16": "bfloat16", "f16": "float16"}


def _mma(printer, e):
    ptx = e.name.rsplit(".", 1)[1]
    dtype = _DTYPE[ptx]
    name = f"tdsl_mma_m16n8k16_{ptx}"
    if not getattr(printer, "has_threads", False):
        raise BuildError(f"{e.name} is a warp's instruction: build a schedule that binds "
                         f"threads, for 'cuda' or 'c' (emulated), not {printer.target!r}")
    fields = dict(name=name, t=printer.mem_type(dtype), ptx=ptx,
                  lane=printer.thread_index("threadIdx.x"))
    if printer.target == "cuda":
        printer.add_helper("tdsl_mma_pack", PACK)
        text = _CUDA.format(comment=LAYOUT.replace("\n", "\n// "), **fields)
    elif printer.target == "c":
        text = _EMULATED.format(a_ik=printer.cast_text("a[i * lda + k]", dtype, "float32"),
                                b_kj=printer.cast_text("b[k * ldb + j]", dtype, "float32"),
                                **fields)
    else:
        raise BuildError(f"{e.name} has no {printer.target} form; build for 'cuda' (sm_80 "
                         "or later) or 'c'")
    printer.add_helper(name, text)
    args = ", ".join(printer.expr(a) for a in e.args[:3])
    steps = ", ".join(f"(int)({printer.expr(a)})" for a in e.args[3:])
    return f"{name}({args}, {steps})"


OPS = {"cuda.mma_m16n8k16.bf16": _mma, "cuda.mma_m16n8k16.f16": _mma, **mma_fragments.OPS}


def emit(printer, e) -> str:
    return OPS[e.name](printer, e)
