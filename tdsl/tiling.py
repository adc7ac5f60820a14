"""Schedule sizes derived from a `tdsl.target.Target`: the register tile of a multiply-add
micro-kernel, vector widths along a row, work per parallel task.

Every schedule tdsl ships (tdsl.examples, the graph layer's strategies) takes its sizes
from here, so that one description of the machine sizes all of them.

The register tile model (GEMM, convolution, dense): a tile of `rows x vecs` vector
accumulators stays in registers while the reduction runs; each step loads `vecs` vectors of
the reused operand (B's packed panel, the conv weights), broadcasts one scalar per row (A,
the input pixel) and issues `rows * vecs` FMAs. It must fit the register file with the
loaded vectors and one broadcast (`rows * vecs + vecs + 1 <= registers`), with at most three
quarters of the registers as accumulators (LLVM needs the rest for operands, broadcasts and
temporaries: 28 accumulators of 32 spilled where 14 or 16 ran at peak); it should have at
least `fma_units * fma_latency` independent accumulators, and FMAs per load
`rows * vecs / (rows + vecs)` of about 1.6 (more only adds register pressure: two loads per
cycle feed two FMAs per cycle on every x86 core we measured). Ragged tiles (a `rows` that
does not divide the extent, a vector block that pads the other) cost a guarded tail or
wasted lanes and are scored down.
"""
from __future__ import annotations

from . import dtype as dt
from .target import Target, as_target

ENOUGH_FMA_PER_LOAD = 1.6
RAGGED_ROWS = 0.6        # a tail of rows: a second, guarded copy of the micro-kernel
RAGGED_VECS = 0.9        # padding lanes in the last vector block
LONG_ROW = 4             # row_vector: vectors in a row above which it keeps a masked tail


def register_tile(target, rows_extent: int, cols_extent: int, dtype="float32",
                  max_rows=16, max_vecs=4, whole_rows=False, whole_vecs=False,
                  ragged_rows=RAGGED_ROWS):
    """(rows, vecs) of the register tile for an output of `rows_extent` broadcast rows and
    `cols_extent` elements along the vectorized axis. `whole_rows` / `whole_vecs`: `rows` must
    divide `rows_extent` / `vecs` must divide the vectors of a row (a layout blocked by whole
    vectors, such as NCHW[x]c; a convolution row, whose ragged tail cost 2x on 7-wide rows)."""
    t = as_target(target)
    lanes = t.vector_lanes(dtype)
    regs = max(t.vector_registers, 4)
    best, best_key = (1, 1), None
    col_vecs = -(-cols_extent // lanes)
    for vecs in range(1, min(max_vecs, col_vecs) + 1):
        if whole_vecs and col_vecs % vecs:
            continue
        for rows in range(1, min(max_rows, rows_extent) + 1):
            if whole_rows and rows_extent % rows:
                continue
            used = rows * vecs + vecs + 1
            if used > regs or rows * vecs > 3 * regs // 4:
                break
            score = tile_score(t, rows, vecs, rows_extent, cols_extent, dtype, ragged_rows)
            key = (round(score, 6), -used, -vecs)
            if best_key is None or key > best_key:
                best, best_key = (rows, vecs), key
    return best


def tile_score(target, rows: int, vecs: int, rows_extent: int, cols_extent: int,
               dtype="float32", ragged_rows=RAGGED_ROWS) -> float:
    """The register tile model's figure of merit (higher is better; `register_tile` takes
    the best that fits the registers): FMAs per load up to enough, independent chains up to
    enough, the share of lanes that are not padding, and the costs of ragged tails."""
    t = as_target(target)
    lanes = t.vector_lanes(dtype)
    acc = rows * vecs
    padded = -(-cols_extent // (vecs * lanes)) * vecs * lanes
    score = min(acc / (rows + vecs), ENOUGH_FMA_PER_LOAD)
    score *= min(1.0, acc / max(t.fma_chains, 1))
    score *= cols_extent / padded
    if padded != cols_extent:
        score *= RAGGED_VECS
    if rows_extent % rows:
        score *= ragged_rows
    return score


def depthwise_tile(target, rows: int, width: int, max_rows: int = 1):
    """(pixels, rows) of a channel-blocked depthwise conv's register tile: each accumulator
    is one pixel's vector of channels and each FMA loads its own input vector (neighbours
    share loads only along a row), so the tile needs the FMA chains' worth of accumulators
    and no more than half the registers (the rest hold the input row and the taps'
    weights) -- nor more than that: a bigger tile only lengthens the unrolled body; pixels
    divide the row and rows the image, so no tile is ragged. The float conv takes one row
    (`max_rows` 1): tiles of several rows ran 1.5-3x slower than one row of the same
    width or narrower on Zen 5 and on Haswell's code, 3x3 and 5x5, strides 1 and 2 (a
    4x4 tile where the row divided by 14 or 7 on a 28-wide image), even where they had
    twice the accumulators. The integer conv (conv_int8.py) still spreads its tile over
    up to four rows."""
    t = as_target(target)
    regs = max(t.vector_registers, 4)
    want = max(2 * t.fma_chains, 4)
    best = (1, 1)
    for xb in range(1, min(width, regs // 2) + 1):
        if width % xb:
            continue
        for rb in range(1, min(rows, max_rows) + 1):
            if rows % rb or xb * rb > regs // 2:
                continue
            # enough accumulators, then one row, then the smallest tile: once the FMA
            # chains are covered, a wider tile only takes registers
            key = (min(xb * rb, want), -rb, -xb * rb)
            if key > (min(best[0] * best[1], want), -best[1], -best[0] * best[1]):
                best = (xb, rb)
    return best


def gemm_tile(target, M: int, N: int, dtype="float32"):
    """(mr, nr) of the GEMM micro-kernel: mr rows of A broadcast, nr columns of B."""
    rows, vecs = register_tile(target, M, N, dtype)
    return rows, vecs * as_target(target).vector_lanes(dtype)


def row_vector(target, width: int, dtype="float32") -> int:
    """Vector width for a loop over a row of `width` elements: the target's lanes, or, for
    a row of at most LONG_ROW vectors, a divisor of `width` between half and all of them
    (no tail), or the row itself when shorter.

    A longer row keeps the full width and a masked tail: the tail is one iteration of
    many, while a vector of a width that is not a power of two (15 lanes for attention's
    rows of 1500) makes every load and store of the loop masked or split into pieces and
    takes the exponential off its one-instruction scaling (vscalefps needs 16 lanes)."""
    lanes = as_target(target).vector_lanes(dtype)
    if width <= lanes:
        return width
    if width > LONG_ROW * lanes:
        return lanes
    for d in range(lanes, lanes // 2 - 1, -1):
        if width % d == 0:
            return d
    return lanes


def worth_a_vector(target, width: int, dtype="float32") -> bool:
    """Whether a loop over `width` contiguous elements is worth vectorizing: half the
    target's lanes or more, or a power of two that fills a 128-bit vector (the 16 uint8
    channels of a quantized network's blocked image are a quarter of a 512-bit vector of
    bytes, and its max pool is still far faster as 16-byte vectors than as the scalar
    loop), or 64 bits of bytes (the 8 uint8 channels of an AVX2 target's blocks, as in
    ResNet-18's quantized max pool)."""
    if dtype == "bool":
        return False
    lanes = as_target(target).vector_lanes(dtype)
    bits = dt.bits(dtype)
    return width >= max(2, lanes // 2) or \
        (width & (width - 1) == 0 and width * bits >= (64 if bits <= 8 else 128))


TRANSPOSE_TILE_MAX_BYTES = 2048   # a square tile transposed in registers: 32 AVX-512 registers


def transpose_tile(target, rows_extent: int, cols_extent: int, dtype="float32") -> int:
    """Side of the square tiles in which a transpose is read (`rows_extent` rows contiguous
    in memory, each written as a column of `cols_extent`): the largest power of two up to
    the target's lanes that divides the rows (the columns may end in a ragged tile, which
    is read as before), is no longer than the columns and fits `TRANSPOSE_TILE_MAX_BYTES`;
    0 below four lanes, where a strided read costs no more."""
    n = as_target(target).vector_lanes(dtype)
    while n >= 4 and (rows_extent % n or n > cols_extent or
                      n * n * dt.itemsize(dtype) > TRANSPOSE_TILE_MAX_BYTES):
        n //= 2
    return n if n >= 4 else 0


def parallel_chunks(target) -> int:
    """Parallel tasks worth splitting a loop into: a few per core, for balance."""
    return 4 * as_target(target).num_cores


__all__ = ["Target", "register_tile", "depthwise_tile", "gemm_tile", "row_vector", "worth_a_vector",
           "parallel_chunks"]
