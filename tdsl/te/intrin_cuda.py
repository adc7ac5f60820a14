"""The CUDA tensor intrinsics tdsl ships: the tensor-core `mma.sync.aligned.m16n8k16` of
sm_80 and later, 16 x 8 float32 outputs += a 16 x 16 block of A (bfloat16 or float16) times
a 16 x 8 block of B, computed by the 32 lanes of a warp together; and Hopper's warpgroup
`wgmma.mma_async.m64n64k16` (sm_90a, `wgmma_m64n64k16`), which four warps call together,
each receiving its 16 rows in the same register layout.

Every intrinsic here is `warp` (every lane makes the call and does its part) and `strided`
(the blocks are tiles of larger buffers; their row steps become the call's leading
dimensions). The code is the source printers' (`tdsl.codegen.source.tensor_ops`): the
instructions in CUDA, their meaning lane by lane for the "c" target's emulation of GPU
kernels.

Where the accumulator lives decides what a call does:

- In scope `ACCUMULATOR` ("mma.accumulator", a `cache_write` stage computed at a loop
  bound to the warps): registers. Each lane holds only its four elements of every 16 x 8
  block, in the instruction's own layout (`tensor_ops.LAYOUT`), so the instruction neither
  loads nor stores C. `mma_m16n8k16(dtype, tiles)` then covers `tiles` = (tm, tn) blocks of
  16 x 8 per call (A fragments loaded once per block row, B once per block column, with
  `ldmatrix` from shared memory); its `reduce_init` zeroes the block (the fill) and
  `mma_store(tiles)` writes it to shared or global memory. Nothing else may touch such a
  buffer: `tdsl.passes.mma_fragments` checks that, and gives each lane its array.
- In shared or global memory (the first form, one 16 x 8 block a call): each lane loads
  its elements of C around the instruction and stores them back.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import expr as E
from .compute import compute, placeholder, reduce_axis, sum as _sum
from .tensor_intrin import call, decl_tensor_intrin

M, N, K = 16, 8, 16
DTYPES = {"bfloat16": "bf16", "float16": "f16"}
ACCUMULATOR = "mma.accumulator"
# the calls on accumulators in registers, the only ones tdsl.passes.mma_fragments lets
# touch them
FRAGMENT_CALLS = ("cuda.mma_m16n8k16_frag.bf16", "cuda.mma_m16n8k16_frag.f16",
                  "cuda.mma_fill_m16n8", "cuda.mma_store_m16n8",
                  "cuda.wgmma_m64n64k16.bf16", "cuda.wgmma_m64n64k16.f16")
WG_N = 64           # the columns of a wgmma call: one 128-byte swizzle atom of B
SWIZZLE = 128       # the layout wgmma's shared operands are read in (storage_swizzle)


def _row_step(region, what, name):
    if region.buffer.swizzle:
        raise ScheduleError(f"{name}: the {what} block is in '{region.buffer.name}', laid out "
                            "with storage_swizzle; ldmatrix and the fragments read plain rows")
    if region.strides is None or not E.is_const_int(region.strides[1], 1):
        raise ScheduleError(f"{name}: the {what} block must have contiguous rows, has "
                            f"steps {region.strides}")
    return region.strides[0]


def _tiles(tiles, name):
    ok = isinstance(tiles, (tuple, list)) and len(tiles) == 2 and \
        all(isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= 16 for t in tiles)
    if not ok:
        raise ScheduleError(f"{name}: tiles must be (blocks of rows, blocks of columns), two "
                            f"ints in 1..16, got {tiles!r}")
    return tuple(tiles)


def _in_registers(region, name, what):
    if region.buffer.scope != ACCUMULATOR:
        raise ScheduleError(f"{name}: the {what} '{region.buffer.name}' is in scope "
                            f"'{region.buffer.scope}'; it must be a cache_write stage in scope "
                            f"'{ACCUMULATOR}'")


def mma_m16n8k16(dtype="bfloat16", tiles=(1, 1)):
    """C[i, j] += sum_k float(A[i, k]) * float(B[k, j]) over a (16 tm) x (8 tn) x 16 block
    (A row-major (16 tm) x 16, B row-major 16 x (8 tn), C float32), tm * tn `mma.sync` of
    a warp. C in scope "mma.accumulator" (registers) takes any `tiles` = (tm, tn) and
    zeroes itself; C in memory takes (1, 1)."""
    if dtype not in DTYPES:
        raise ScheduleError(f"mma_m16n8k16: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    tm, tn = _tiles(tiles, "mma_m16n8k16")
    ptx = DTYPES[dtype]
    A = placeholder((M * tm, K), dtype=dtype, name="A")
    B = placeholder((K, N * tn), dtype=dtype, name="B")
    k = reduce_axis((0, K), name="k")
    suffix = "" if (tm, tn) == (1, 1) else f"_{tm}x{tn}"
    C = compute((M * tm, N * tn), lambda i, j: _sum(
        A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
        name=f"mma_m16n8k16_{ptx}{suffix}")

    def steps(ins, outs):
        a, b = ins
        c = outs[0]
        return (_row_step(c, "C", C.name), _row_step(a, "A", C.name),
                _row_step(b, "B", C.name))

    def fimpl(ins, outs):
        a, b = ins
        c = outs[0]
        if c.buffer.scope == ACCUMULATOR:
            return call(f"cuda.mma_m16n8k16_frag.{ptx}", c.access_ptr("rw"), a.access_ptr(),
                        b.access_ptr(), *steps(ins, outs), tm, tn)
        if (tm, tn) != (1, 1):
            raise ScheduleError(f"{C.name}: {tm} x {tn} blocks a call need the accumulator "
                                f"in scope '{ACCUMULATOR}' (registers); '{c.buffer.name}' is "
                                f"in '{c.buffer.scope}'")
        return call(f"cuda.mma_m16n8k16.{ptx}", c.access_ptr("rw"), a.access_ptr(),
                    b.access_ptr(), *steps(ins, outs))

    def fill(outs):     # accumulators in memory keep tdsl's init loops
        c = outs[0]
        if c.buffer.scope != ACCUMULATOR:
            return None
        return call("cuda.mma_fill_m16n8", c.access_ptr("w"), _row_step(c, "C", C.name), tm, tn)

    return decl_tensor_intrin(C.op, fimpl, inputs=[A, B], strided=True, warp=True,
                              reduce_init=fill)


def mma_store(tiles=(1, 1)):
    """D[i, j] = F[i, j] over a (16 tm) x (8 tn) block: a warp writes the accumulator F
    (scope "mma.accumulator") to D in shared or global memory, each lane its own
    elements (rows g and g + 8, columns 2t and 2t + 1 of every 16 x 8 block)."""
    tm, tn = _tiles(tiles, "mma_store")
    F = placeholder((M * tm, N * tn), dtype="float32", name="F")
    D = compute((M * tm, N * tn), lambda i, j: F[i, j], name=f"mma_store_m16n8_{tm}x{tn}")

    def fimpl(ins, outs):
        f, d = ins[0], outs[0]
        _in_registers(f, D.name, "block it reads")
        if d.buffer.scope == ACCUMULATOR:
            raise ScheduleError(f"{D.name}: writes memory; '{d.buffer.name}' is itself in "
                                f"scope '{ACCUMULATOR}'")
        return call("cuda.mma_store_m16n8", d.access_ptr("w"), f.access_ptr("r"),
                    _row_step(d, "output", D.name), _row_step(f, "accumulator", D.name), tm, tn)

    return decl_tensor_intrin(D.op, fimpl, inputs=[F], strided=True, warp=True)


def _wgmma_operand(region, what, name):
    """The row step of a wgmma operand: a tile of a shared buffer laid out with the
    128-byte swizzle, rows of exactly 128 bytes (A: 64 k-elements, B: 64 n-elements)."""
    buf = region.buffer
    if buf.scope != "shared" or buf.swizzle != SWIZZLE:
        raise ScheduleError(f"{name}: the {what} block is in '{buf.name}' (scope "
                            f"'{buf.scope}', swizzle {buf.swizzle or 'none'}); wgmma reads it "
                            f"from shared memory laid out with storage_swizzle({SWIZZLE})")
    if region.strides is None or not E.is_const_int(region.strides[1], 1) or \
            not E.is_const_int(region.strides[0], WG_N):
        raise ScheduleError(f"{name}: the {what} block's rows must be {WG_N} contiguous "
                            f"elements (128 bytes, the swizzle's row), has steps "
                            f"{region.strides}")
    return region.strides[0]


def wgmma_m64n64k16(dtype="bfloat16", k_steps=1):
    """Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a), seen from one warp of the four
    of a warpgroup: C (16 x 64, float32) += A (16 x 16 k_steps) @ B (16 k_steps x 64).

    The four warps (threadIdx.y % 4 = 0..3, 32 lanes on threadIdx.x) make the call
    together; one instruction per 16 k computes the warpgroup's 64 x 64 block, warp r
    receiving rows 16 r to 16 r + 15, so warp r's A block must be the warpgroup's A rows
    16 r on. C is in scope "mma.accumulator" (registers, the layout of `mma_m16n8k16`:
    `mma_store((1, 8))` writes it, the fill zeroes it). A (K-major: rows of 64 k) and B
    (MN-major: rows of 64 n) are tiles of shared buffers with `storage_swizzle(128)`,
    which the matrix descriptors describe; the call waits for its instructions."""
    if dtype not in DTYPES:
        raise ScheduleError(f"wgmma_m64n64k16: dtype must be one of {sorted(DTYPES)}, got "
                            f"{dtype!r}")
    if isinstance(k_steps, bool) or not isinstance(k_steps, int) or not 1 <= k_steps <= 4:
        raise ScheduleError(f"wgmma_m64n64k16: k_steps must be 1..4 (16 to 64 k, one "
                            f"128-byte row of A), got {k_steps!r}")
    ptx = DTYPES[dtype]
    A = placeholder((M, K * k_steps), dtype=dtype, name="A")
    B = placeholder((K * k_steps, WG_N), dtype=dtype, name="B")
    k = reduce_axis((0, K * k_steps), name="k")
    C = compute((M, WG_N), lambda i, j: _sum(
        A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
        name=f"wgmma_m64n64k{K * k_steps}_{ptx}")
    tn = WG_N // N

    def fimpl(ins, outs):
        a, b = ins
        c = outs[0]
        _in_registers(c, C.name, "accumulator")
        _wgmma_operand(a, "A", C.name)
        _wgmma_operand(b, "B", C.name)
        return call(f"cuda.wgmma_m64n64k16.{ptx}", c.access_ptr("rw"), a.access_ptr(),
                    b.access_ptr(), _row_step(c, "C", C.name), k_steps)

    def fill(outs):
        c = outs[0]
        _in_registers(c, C.name, "accumulator")
        return call("cuda.mma_fill_m16n8", c.access_ptr("w"), _row_step(c, "C", C.name), 1, tn)

    return decl_tensor_intrin(C.op, fimpl, inputs=[A, B], strided=True, warp=True,
                              reduce_init=fill)
