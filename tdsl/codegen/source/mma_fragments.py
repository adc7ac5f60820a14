"""The tensor-core calls on accumulators held in registers (`tdsl.intrin_cuda`, scope
"mma.accumulator"), for the C-family printers: `cuda.mma_fill_m16n8` (zero),
`cuda.mma_m16n8k16_frag.{bf16,f16}` (tm x tn `mma.sync` on A and B fragments loaded once
per block row and column) and `cuda.mma_store_m16n8` (the lane's elements to memory).

`tdsl.passes.mma_fragments` has made each accumulator a per-thread array holding the lane's
elements (LAYOUT); each call gets a pointer to the lane's first element of its block and
the accumulator's width, so block (i, j) of a call is at c + (i * (ldc / 8) + j) * 4. With
the helpers inlined and their loops unrolled every index is a constant and nvcc keeps the
array in registers (tests/test_mma.py reads ptxas's report for local memory).

CUDA loads A with `ldmatrix.x4` and B (stored k-major) with `ldmatrix.x4.trans` (two
blocks of columns at a time; `.x2.trans` for an odd last one) when the operand sits in
shared memory with every row of 8 elements 16-byte aligned; otherwise, and in the "c"
emulation, each lane reads its own elements, which is the same layout spelled out.
"""
from __future__ import annotations

from ... import arith
from ...errors import BuildError
from ...ir import expr as E

# The fragment layout all the helpers share (printed above the CUDA ones as a comment).
LAYOUT = """PTX ISA, section 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating point
type": lane l holds, with g = l >> 2 (groupID) and t = l % 4 (threadID_in_group),
  A (16 x 16, .row): a0,a1 = A[g][2t, 2t+1]    a2,a3 = A[g+8][2t, 2t+1]
                     a4,a5 = A[g][2t+8, 2t+9]  a6,a7 = A[g+8][2t+8, 2t+9]
  B (16 x 8, .col):  b0,b1 = B[2t, 2t+1][g]    b2,b3 = B[2t+8, 2t+9][g]
  C, D (16 x 8):     c0,c1 = C[g][2t, 2t+1]    c2,c3 = C[g+8][2t, 2t+1]
two 16-bit elements to a 32-bit register, the lower-numbered one in the low half.
In scope mma.accumulator (W columns) the lane's c0..c3 of the 16 x 8 block at row 16 i,
column 8 j are its elements (i * (W / 8) + j) * 4 + 0..3."""

# its own helper: a kernel with both the bf16 and the f16 instruction defines it once
PACK = r"""
static __device__ __forceinline__ unsigned tdsl_mma_pack(const unsigned short *lo,
                                                         const unsigned short *hi) {
  return (unsigned)*lo | ((unsigned)*hi << 16);
}
"""

_A_LDMATRIX = r"""  #pragma unroll
  for (int i = 0; i < {tm}; ++i) {{    // matrices (rows 0-7 | 8-15) x (columns 0-7 | 8-15)
    const unsigned p = (unsigned)__cvta_generic_to_shared(a + (i * 16 + (lane & 15)) * lda +
                                                          (lane >> 4) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0, %1, %2, %3}}, [%4];"
                 : "=r"(af[i][0]), "=r"(af[i][1]), "=r"(af[i][2]), "=r"(af[i][3]) : "r"(p));
  }}
"""

_A_SCALAR = r"""  #pragma unroll
  for (int i = 0; i < {tm}; ++i) {{
    const unsigned short *r0 = a + (i * 16 + g) * lda + 2 * t, *r8 = r0 + 8 * lda;
    af[i][0] = tdsl_mma_pack(&r0[0], &r0[1]);
    af[i][1] = tdsl_mma_pack(&r8[0], &r8[1]);
    af[i][2] = tdsl_mma_pack(&r0[8], &r0[9]);
    af[i][3] = tdsl_mma_pack(&r8[8], &r8[9]);
  }}
"""

_B_LDMATRIX_X4 = r"""  #pragma unroll
  for (int j = 0; j + 1 < {tn}; j += 2) {{  // k rows 0-7 | 8-15 of column blocks j, j + 1
    const unsigned p = (unsigned)__cvta_generic_to_shared(b + (lane & 15) * ldb + j * 8 +
                                                          (lane >> 4) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%0, %1, %2, %3}}, [%4];"
                 : "=r"(bf[j][0]), "=r"(bf[j][1]), "=r"(bf[j + 1][0]), "=r"(bf[j + 1][1])
                 : "r"(p));
  }}
"""

_B_LDMATRIX_X2 = r"""  {{
    const unsigned p = (unsigned)__cvta_generic_to_shared(b + (lane & 15) * ldb + {j} * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{%0, %1}}, [%2];"
                 : "=r"(bf[{j}][0]), "=r"(bf[{j}][1]) : "r"(p));
  }}
"""

_B_SCALAR = r"""  #pragma unroll
  for (int j = 0; j < {tn}; ++j) {{
    const unsigned short *col = b + j * 8 + g;
    bf[j][0] = tdsl_mma_pack(&col[(2 * t) * ldb], &col[(2 * t + 1) * ldb]);
    bf[j][1] = tdsl_mma_pack(&col[(2 * t + 8) * ldb], &col[(2 * t + 9) * ldb]);
  }}
"""

_CUDA_MMA = r"""
// {comment}
// A: {a_how}; B: {b_how}
static __device__ __forceinline__ void {name}(float *c, const {t} *a_, const {t} *b_,
                                             int ldc, int lda, int ldb) {{
  const unsigned short *a = (const unsigned short *)a_, *b = (const unsigned short *)b_;
  const int lane = {lane} & 31, g = lane >> 2, t = lane & 3;
  (void)g; (void)t;
  unsigned af[{tm}][4], bf[{tn}][2];
{a_load}{b_load}  #pragma unroll
  for (int i = 0; i < {tm}; ++i) {{
    #pragma unroll
    for (int j = 0; j < {tn}; ++j) {{
      float *d = c + (i * (ldc / 8) + j) * 4;
      // not volatile: it touches no memory, so nvcc may schedule it between the loads
      asm("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 "
          "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]),
            "r"(bf[j][0]), "r"(bf[j][1]));
    }}
  }}
}}
"""

_EMULATED_MMA = r"""
/* {name}: what the {tm} x {tn} mma.sync compute for this lane: its elements c0..c3 of
   each 16 x 8 block (the layout of PTX ISA 9.7.14.5.8), each += its row of A times its
   column of B. */
static inline void {name}(float *c, const {t} *a, const {t} *b, int ldc, int lda, int ldb) {{
  const int lane = {lane} & 31, g = lane >> 2, t = lane & 3;
  for (int i = 0; i < {tm}; ++i)
    for (int j = 0; j < {tn}; ++j) {{
      float *d = c + (i * (ldc / 8) + j) * 4;
      for (int r = 0; r < 4; ++r) {{
        const int row = i * 16 + g + 8 * (r >> 1), col = j * 8 + 2 * t + (r & 1);
        float acc = d[r];
        for (int k = 0; k < 16; ++k)
          acc += {a_ik} * {b_kj};
        d[r] = acc;
      }}
    }}
}}
"""

_FILL = r"""
{qual} void {name}(float *c, int ldc) {{
  {pragma}
  for (int i = 0; i < {tm}; ++i) {{
    {pragma}
    for (int j = 0; j < {tn}; ++j) {{
      float *d = c + (i * (ldc / 8) + j) * 4;
      d[0] = 0.0f; d[1] = 0.0f; d[2] = 0.0f; d[3] = 0.0f;
    }}
  }}
}}
"""

_STORE = r"""
/* {name}: the lane's c0..c3 of each 16 x 8 block to rows g, g + 8 and columns 2t, 2t + 1 */
{qual} void {name}(float *dst, const float *c, int ld, int ldc) {{
  const int lane = {lane} & 31, g = lane >> 2, t = lane & 3;
  {pragma}
  for (int i = 0; i < {tm}; ++i) {{
    {pragma}
    for (int j = 0; j < {tn}; ++j) {{
      const float *d = c + (i * (ldc / 8) + j) * 4;
      float *top = dst + (i * 16 + g) * ld + j * 8 + 2 * t, *bottom = top + 8 * ld;
{stores}
    }}
  }}
}}
"""

_STORE_SCALAR = "      top[0] = d[0]; top[1] = d[1]; bottom[0] = d[2]; bottom[1] = d[3];"
_STORE_FLOAT2 = ("      *(float2 *)top = make_float2(d[0], d[1]);\n"
                 "      *(float2 *)bottom = make_float2(d[2], d[3]);")

_DTYPE = {"bf16": "bfloat16", "f16": "float16"}


def _int(e, name, what):
    if not isinstance(e, E.IntImm):
        raise BuildError(f"{name}: the {what} must be a constant, got {e}")
    return e.value


def _aligned(printer, ptr, step, elems):
    """Why the block at `ptr` (an address_of) with row step `step` cannot be read or written
    `elems` elements at a time (a multiple of that from an aligned base), or None."""
    load = ptr.args[0]
    if not isinstance(step, E.IntImm) or step.value % elems:
        return f"its row step {step} is not a multiple of {elems} elements"
    if not arith.is_divisible(load.indices[0], E.const(elems), printer.ranges):
        return f"its first element is not at a multiple of {elems} elements"
    return None


def _ldmatrix(printer, ptr, step):
    """Why ldmatrix cannot read the operand at `ptr`, or None: it reads shared memory,
    8 rows of 16 bytes, each 16-byte aligned (shared buffers are declared __align__(16))."""
    if ptr.args[0].buffer.scope != "shared":
        return f"'{ptr.args[0].buffer.name}' is not in shared memory"
    return _aligned(printer, ptr, step, 8)


def _needs_threads(printer, e):
    if not getattr(printer, "has_threads", False):
        raise BuildError(f"{e.name} is a warp's instruction: build a schedule that binds "
                         f"threads, for 'cuda' or 'c' (emulated), not {printer.target!r}")
    if printer.target not in ("cuda", "c"):
        raise BuildError(f"{e.name} has no {printer.target} form; build for 'cuda' (sm_80 "
                         "or later) or 'c'")


def _loop_fields(printer, tm, tn):
    return dict(tm=tm, tn=tn, qual=printer.helper_qual(),
                pragma="#pragma unroll" if printer.target == "cuda" else "",
                lane=printer.thread_index("threadIdx.x"))


def mma(printer, e):
    """c (the lane's elements) += A x B over tm x tn blocks of 16 x 8."""
    _needs_threads(printer, e)
    ptx = e.name.rsplit(".", 1)[1]
    dtype = _DTYPE[ptx]
    c, a, b, ldc, lda, ldb = e.args[:6]
    tm, tn = (_int(x, e.name, "block count") for x in e.args[6:8])
    fields = dict(t=printer.mem_type(dtype), ptx=ptx, **_loop_fields(printer, tm, tn))
    if printer.target == "cuda":
        why_a, why_b = _ldmatrix(printer, a, lda), _ldmatrix(printer, b, ldb)
        name = f"tdsl_mma_frag_{ptx}_{tm}x{tn}_{'s' if why_a else 'l'}{'s' if why_b else 'l'}"
        b_load = _B_SCALAR if why_b else _B_LDMATRIX_X4 + (
            _B_LDMATRIX_X2.replace("{j}", str(tn - 1)) if tn % 2 else "")
        if why_a or why_b:
            printer.add_helper("tdsl_mma_pack", PACK)
        text = _CUDA_MMA.format(
            comment=LAYOUT.replace("\n", "\n// "), name=name,
            a_how="ldmatrix.x4" if why_a is None else f"scalar loads ({why_a})",
            b_how="ldmatrix.x4/.x2.trans" if why_b is None else f"scalar loads ({why_b})",
            a_load=(_A_SCALAR if why_a else _A_LDMATRIX).format(**fields),
            b_load=b_load.format(**fields), **fields)
    else:
        name = f"tdsl_mma_frag_{ptx}_{tm}x{tn}"
        text = _EMULATED_MMA.format(
            name=name, a_ik=printer.cast_text("a[row * lda + k]", dtype, "float32"),
            b_kj=printer.cast_text("b[k * ldb + col]", dtype, "float32"), **fields)
    printer.add_helper(name, text)
    args = ", ".join(printer.expr(x) for x in (c, a, b))
    steps = ", ".join(f"(int)({printer.expr(x)})" for x in (ldc, lda, ldb))
    return f"{name}({args}, {steps})"


def fill(printer, e):
    """The lane's elements of tm x tn blocks = 0."""
    _needs_threads(printer, e)
    c, ldc = e.args[:2]
    tm, tn = (_int(x, e.name, "block count") for x in e.args[2:4])
    name = f"tdsl_mma_fill_{tm}x{tn}"
    printer.add_helper(name, _FILL.format(name=name, **_loop_fields(printer, tm, tn)))
    return f"{name}({printer.expr(c)}, (int)({printer.expr(ldc)}))"


def store(printer, e):
    """The lane's elements of tm x tn blocks to memory; CUDA writes each pair as a float2
    when the rows allow 8-byte alignment."""
    _needs_threads(printer, e)
    dst, c, ld, ldc = e.args[:4]
    tm, tn = (_int(x, e.name, "block count") for x in e.args[4:6])
    pairs = printer.target == "cuda" and _aligned(printer, dst, ld, 2) is None
    name = f"tdsl_mma_store_{tm}x{tn}{'_v2' if pairs else ''}"
    printer.add_helper(name, _STORE.format(
        name=name, stores=_STORE_FLOAT2 if pairs else _STORE_SCALAR,
        **_loop_fields(printer, tm, tn)))
    args = ", ".join(printer.expr(x) for x in (dst, c))
    return f"{name}({args}, (int)({printer.expr(ld)}), (int)({printer.expr(ldc)}))"


# wgmma.mma_async m64n64k16 (sm_90a): matrix descriptors of the 128-byte swizzle, A
# K-major (rows of 128 bytes, 8 rows a 1024-byte group, 32 bytes further a k16 step), B
# MN-major (k-rows of 128 bytes; 16 k-rows, 2048 bytes, a k16 step); imm-trans-b = 1.
_WGMMA_DESC = r"""
static __device__ __forceinline__ unsigned long long tdsl_wgmma_desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}
"""

_CUDA_WGMMA = r"""
/* {name}: one warp's share of {ks} wgmma.mma_async.m64n64k16 of its warpgroup (the four
   warps threadIdx.y & ~3 .. | 3): warp r holds rows 16 r .. 16 r + 15 of the 64 x 64
   block, in the mma.accumulator layout, so A starts 16 r rows (of 64 elements) before
   the warp's block. */
static __device__ __forceinline__ void {name}(float *c, const {t} *a, const {t} *b, int ldc) {{
  const int rank = {warp} & 3;
  const unsigned sa = (unsigned)__cvta_generic_to_shared(a - rank * 16 * 64);
  const unsigned sb = (unsigned)__cvta_generic_to_shared(b);
  (void)ldc;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  #pragma unroll
  for (int s = 0; s < {ks}; ++s) {{
    const unsigned long long da = tdsl_wgmma_desc(sa + s * 32), db = tdsl_wgmma_desc(sb + s * 2048);
    asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.{ptx}.{ptx} "
                 "{{{regs}}}, %32, %33, p, 1, 1, 0, 1;\n}}\n"
                 : {outs} : "l"(da), "l"(db));
  }}
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}}
"""

_EMULATED_WGMMA = r"""
/* {name}: what {ks} wgmma.mma_async.m64n64k16 give this lane: its elements of the
   warp's 16 x 64 rows (warp r = threadIdx.y % 4 of the warpgroup: rows 16 r on), each +=
   its row of A times its column of B, both read as the descriptors describe them:
   element (row, k) of A at a - 16 r rows + row * 128 + 2 k bytes, (k, n) of B at
   b + k * 128 + 2 n, every address through the 128-byte swizzle of the address bits. */
static inline const {t} *tdsl_wgmma_at_{ptx}(const char *p) {{
  const uintptr_t x = (uintptr_t)p;
  return (const {t} *)(x ^ (((x >> 7) & 7) << 4));
}}
static inline void {name}(float *c, const {t} *a, const {t} *b, int ldc) {{
  const int lane = {lane} & 31, g = lane >> 2, t = lane & 3, rank = {warp} & 3;
  const char *a0 = (const char *)a - rank * 16 * 128, *b0 = (const char *)b;
  (void)ldc;
  for (int j = 0; j < 8; ++j)
    for (int r = 0; r < 4; ++r) {{
      const int row = rank * 16 + g + 8 * (r >> 1), col = j * 8 + 2 * t + (r & 1);
      float acc = c[j * 4 + r];
      for (int k = 0; k < 16 * {ks}; ++k)
        acc += {a_ik} * {b_kj};
      c[j * 4 + r] = acc;
    }}
}}
"""


def wgmma(printer, e):
    """c (the lane's elements of a 16 x 64 block) += the warpgroup's A x B, k_steps x 16 k."""
    _needs_threads(printer, e)
    ptx = e.name.rsplit(".", 1)[1]
    dtype = _DTYPE[ptx]
    c, a, b, ldc = e.args[:4]
    ks = _int(e.args[4], e.name, "number of k steps")
    fields = dict(t=printer.mem_type(dtype), ptx=ptx, ks=ks,
                  warp=printer.thread_index("threadIdx.y"),
                  lane=printer.thread_index("threadIdx.x"))
    name = f"tdsl_wgmma_{ptx}_n64_k{16 * ks}"
    if printer.target == "cuda":
        printer.add_helper("tdsl_wgmma_desc", _WGMMA_DESC)
        printer.uses_wgmma = True
        text = _CUDA_WGMMA.format(name=name, regs=", ".join(f"%{i}" for i in range(32)),
                                  outs=", ".join(f'"+f"(c[{i}])' for i in range(32)),
                                  **fields)
    else:
        text = _EMULATED_WGMMA.format(
            name=name, a_ik=printer.cast_text(f"*tdsl_wgmma_at_{ptx}(a0 + row * 128 + 2 * k)",
                                              dtype, "float32"),
            b_kj=printer.cast_text(f"*tdsl_wgmma_at_{ptx}(b0 + k * 128 + 2 * col)", dtype,
                                   "float32"),
            **fields)
    printer.add_helper(name, text)
    args = ", ".join(printer.expr(x) for x in (c, a, b))
    return f"{name}({args}, (int)({printer.expr(ldc)}))"


OPS = {"cuda.mma_m16n8k16_frag.bf16": mma, "cuda.mma_m16n8k16_frag.f16": mma,
       "cuda.mma_fill_m16n8": fill, "cuda.mma_store_m16n8": store,
       "cuda.wgmma_m64n64k16.bf16": wgmma, "cuda.wgmma_m64n64k16.f16": wgmma}
