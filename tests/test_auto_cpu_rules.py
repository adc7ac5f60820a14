"""The CPU auto-scheduler's contraction and reduction rules on the shapes they were written
for, checked against numpy at ragged and symbolic sizes, for the host's ISA and for AVX2
(haswell: 16 registers, 8 lanes) built on the same machine:
- a blocked-layout convolution (NCHW[x]c) whose vector axis is one vector: the register tile
  also spans blocks of the channel-block axis (the hand schedule's tile);
- a batch matmul whose rows are a prime count (attention over 197 tokens): a tile of several
  rows with a ragged tail, not one row;
- row sums: parallel over rows, the vectors of partial sums added as vectors first;
- depthwise convolutions (a small reduction per output, the padding inlined as bounds
  tests): rows in whole vectors and a ragged last one."""
import re

import numpy as np
import pytest

import tdsl
from tdsl.examples import kernels
from tdsl.target import Target

TARGETS = ["llvm", "llvm -mcpu=haswell"]


def _data(*shape):
    return np.random.default_rng(sum(shape)).uniform(-1, 1, size=shape).astype(np.float32)


def _conv_nchwc(C, H, W, CO, k, stride, pad, bn, relu=False):
    D, Wp, O = kernels.conv_nchwc(C, H, W, CO, k, stride, pad, bn)
    if relu:
        O = tdsl.compute(O.shape, lambda *i: tdsl.max(O[i], tdsl.const(0, "float32")), name="relu")
    return D, Wp, O


def _conv_ref(d, w, stride, pad, bn):
    """The reference in the blocked layout (CO/bn, OH, OW, bn)."""
    out = kernels.conv_reference(d, w, stride, pad)
    CO, OH, OW = out.shape
    return out.reshape(CO // bn, bn, OH, OW).transpose(0, 2, 3, 1)


def _tile_decision(s, name):
    return [d for d in s.explain().decisions if d.rule == "register-tile" and d.stage == name][0]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("C,H,W,CO,k,stride,pad,relu", [
    (5, 9, 10, 4, 3, 1, 1, False),       # 10 columns, 9 rows, 5 input channels
    (3, 15, 15, 6, 3, 2, 1, True),       # stride 2, with an elementwise epilogue
    (7, 6, 10, 8, 1, 2, 0, False),       # 1x1 stride 2
    (4, 15, 15, 3, 7, 2, 3, False),      # a 7x7 stem
])
def test_blocked_conv_tile_spans_channel_blocks(target, C, H, W, CO, k, stride, pad, relu):
    t = Target(target)
    bn = t.vector_lanes("float32")
    CO *= bn
    D, Wp, O = _conv_nchwc(C, H, W, CO, k, stride, pad, bn, relu)
    s = tdsl.auto_schedule(O, target=t)
    d = _tile_decision(s, "conv")
    assert "blocks" in d.action, d
    f = tdsl.build(s, [D, Wp, O], target=t)
    x, w = _data(C, H, W), _data(CO, C, k, k)
    wp = np.ascontiguousarray(w.reshape(CO // bn, bn, C, k, k).transpose(0, 2, 3, 4, 1))
    ref = _conv_ref(x, w, stride, pad, bn)
    if relu:
        ref = np.maximum(ref, 0)
    out = np.full(ref.shape, np.nan, np.float32)
    f(x, wp, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("B,M,K,N", [(3, 197, 64, 197), (2, 197, 197, 64), (2, 13, 20, 40)])
def test_prime_row_count_takes_a_ragged_tile_of_rows(target, B, M, K, N):
    t = Target(target)
    A = tdsl.placeholder((B, M, K), name="A")
    Bm = tdsl.placeholder((B, K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((B, M, N), lambda b, i, j: tdsl.sum(A[b, i, k] * Bm[b, k, j], axis=k), name="C")
    s = tdsl.auto_schedule(C, target=t)
    rows = int(re.search(r"by (\d+) x", _tile_decision(s, "C").action).group(1))
    assert rows > 1 and M % rows, _tile_decision(s, "C")
    f = tdsl.build(s, [A, Bm, C], target=t)
    a, b = _data(B, M, K), _data(B, K, N)
    out = np.full((B, M, N), np.nan, np.float32)
    f(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_blocked_conv_symbolic_width(target):
    """Symbolic H and W: the row axis is symbolic, the channel blocks constant."""
    t = Target(target)
    bn = t.vector_lanes("float32")
    H, W = tdsl.var("H"), tdsl.var("W")
    D, Wp, O = _conv_nchwc(6, H, W, 4 * bn, 3, 1, 1, bn)
    s = tdsl.auto_schedule(O, target=t)
    assert "cb by" in _tile_decision(s, "conv").action
    f = tdsl.build(s, [D, Wp, O], target=t)
    for h, w_ in [(5, 19), (8, 8)]:
        x, w = _data(6, h, w_), _data(4 * bn, 6, 3, 3)
        wp = np.ascontiguousarray(w.reshape(4, bn, 6, 3, 3).transpose(0, 2, 3, 4, 1))
        ref = _conv_ref(x, w, 1, 1, bn)
        out = np.full(ref.shape, np.nan, np.float32)
        f(x, wp, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tile", [(3, 2), (2, 4), (5, 3)])
def test_blocked_conv_tile_from_params(tile):
    """A search's tile (rows, vectors): vectors beyond the vector axis span channel blocks
    when they divide them, else the tile stays on the vector axis; both are correct."""
    t = Target("llvm")
    bn = t.vector_lanes("float32")
    D, Wp, O = _conv_nchwc(3, 7, 9, 4 * bn, 3, 1, 1, bn)
    s = tdsl.auto_schedule(O, target=t, params={"tile": tile})
    d = _tile_decision(s, "conv")
    assert (f"cb by {tile[1]}" in d.action) == (4 % tile[1] == 0), d
    f = tdsl.build(s, [D, Wp, O], target=t)
    x, w = _data(3, 7, 9), _data(4 * bn, 3, 3, 3)
    wp = np.ascontiguousarray(w.reshape(4, bn, 3, 3, 3).transpose(0, 2, 3, 4, 1))
    ref = _conv_ref(x, w, 1, 1, bn)
    out = np.full(ref.shape, np.nan, np.float32)
    f(x, wp, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M,N", [(67, 1000), (3, 40009), ("sym", "sym")])
@pytest.mark.parametrize("unroll", [1, 4])
def test_row_sum_parallel_with_vector_partial_sums(target, M, N, unroll):
    t = Target(target)
    symbolic = M == "sym"
    X, R = kernels.row_sum(tdsl.var("M") if symbolic else M, tdsl.var("N") if symbolic else N)
    s = tdsl.auto_schedule(R, target=t, params={"unroll": unroll})
    text = str(tdsl.lower(s, [X, R]))
    lanes = t.vector_lanes("float32")
    assert "parallel(" in text, text        # rows (or parallel partial sums): not lost
    if unroll > 1:
        assert "rfactor again" in str(s.explain()), s.explain()
        assert f"vectorized({lanes})" in text, text
    f = tdsl.build(s, [X, R], target=t)
    for m, n in ([(67, 1000), (5, 333)] if symbolic else [(M, N)]):
        x = _data(m, n)
        out = np.full(m, np.nan, np.float32)
        f(x, out)
        np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("H,W,stride", [(56, 56, 1), (14, 14, 1), (56, 56, 2), (9, 30, 2)])
def test_depthwise_rows_take_whole_vectors(target, H, W, stride):
    """Rows longer than a vector take the target's full width and a ragged last vector (a
    narrower divisor, 14 lanes for a 56-wide row, made every vector a masked one)."""
    t = Target(target)
    C = 5
    D, Wt, O = kernels.depthwise3x3(C, H, W, stride)
    s = tdsl.auto_schedule(O, target=t)
    lanes = t.vector_lanes("float32")
    OW = (W - 1) // stride + 1
    width = lanes if OW > lanes else OW
    assert f"split(x, {width})" in str(s.explain()), s.explain()
    f = tdsl.build(s, [D, Wt, O], target=t)
    d, w = _data(C, H, W), _data(C, 3, 3)
    out = np.full(O.shape, np.nan, np.float32)
    f(d, w, out)
    p = np.pad(d.astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    OH = (H - 1) // stride + 1
    want = sum(p[:, ky:ky + stride * OH:stride, kx:kx + stride * OW:stride] * w[:, ky, kx][:, None, None]
               for ky in range(3) for kx in range(3))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cpu,rows,lanes", [
    ("znver4", 8192, 8),      # 256 MB, more than the last-level cache, split 512-bit ops
    ("znver4", 1024, 16),     # 32 MB fits: full-width vectors
    ("znver5", 8192, 16),     # full-width 512-bit datapath
])
def test_row_sums_streamed_from_memory_load_by_the_datapath(cpu, rows, lanes):
    """A row sum reading more than the last-level cache on a core whose 512-bit operations
    are split in two loads 256-bit vectors (cpu_reduce.streams_split_vectors); the result
    matches numpy where the code runs here."""
    n = 8192
    X = tdsl.placeholder((rows, n), name="X")
    k = tdsl.reduce_axis((0, n), name="k")
    R = tdsl.compute((rows,), lambda i: tdsl.sum(X[i, k], axis=k), name="rowsum")
    target = Target(f"llvm -mcpu={cpu}")
    s = tdsl.auto_schedule(R, target=target)
    text = str(tdsl.lower(s, [X, R]))
    assert "unroll(4)" in text and f"vectorized({lanes})" in text, text
    f = tdsl.build(s, [X, R], target=target)
    # the vectors the machine code adds from memory: LLVM splits an over-wide vector type
    # into its widest registers, so the IR's lanes alone do not say which loads it makes
    reg = {8: "ymm", 16: "zmm"}
    adds = re.findall(r"vaddps\s+-?\d*\(%\w+(?:,%\w+)?\), %([xyz]mm)", f.get_source("asm"))
    assert adds and set(adds) == {reg[lanes]}, adds
    if target.runs_here and rows == 8192:
        x = _data(rows, n)
        out = np.empty(rows, np.float32)
        f(x, out)
        np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("target", TARGETS)
def test_row_reduction_read_through_an_inlined_stage_is_computed_per_row(target):
    """A softmax that multiplies by a reciprocal per row: the reciprocal is inlined into the
    output, and the sum it reads (through it) is still computed inside the output's row
    loop, with the max and the exponentials, not as a separate pass over the whole array."""
    M, N = 37, 200
    X = tdsl.placeholder((M, N), name="X")
    k1, k2 = tdsl.reduce_axis((0, N), name="k1"), tdsl.reduce_axis((0, N), name="k2")
    mx = tdsl.compute((M,), lambda i: tdsl.max(X[i, k1], axis=k1), name="rowmax")
    ex = tdsl.compute((M, N), lambda i, j: tdsl.exp(X[i, j] - mx[i]), name="exp")
    sm = tdsl.compute((M,), lambda i: tdsl.sum(ex[i, k2], axis=k2), name="rowsum")
    rcp = tdsl.compute((M,), lambda i: 1.0 / sm[i], name="rcp")
    Y = tdsl.compute((M, N), lambda i, j: ex[i, j] * rcp[i], name="Y")
    s = tdsl.auto_schedule(Y, target)
    text = str(s.explain())
    for name in ("rowmax", "exp", "rowsum"):
        assert f"{name}: compute_at: compute_at(Y, i)" in text, text
    x = _data(M, N)
    y = np.zeros_like(x)
    tdsl.build(s, [X, Y], target=target)(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,lanes,vectorized", [("uint8", 16, True), ("float32", 16, True), ("uint8", 8, True),
                                                   ("uint8", 4, False), ("int16", 4, False)])
def test_short_axes_of_narrow_elements_fill_a_vector(target, dtype, lanes, vectorized):
    """A max pool of a blocked uint8 image (a quantized network's): its 16 channels are a
    quarter of a 512-bit vector of bytes, yet a whole 128-bit one, and are vectorized; so
    are 8 bytes (an AVX2 target's blocks of 8 channels); 4 bytes, or 4 int16, are not."""
    H = 11
    X = tdsl.placeholder((2, H, H, lanes), dtype, name="X")
    ry, rx = tdsl.reduce_axis((0, 3), name="ry"), tdsl.reduce_axis((0, 3), name="rx")
    P = tdsl.compute((2, 5, 5, lanes), lambda c, y, x, ln: tdsl.max(X[c, 2 * y + ry, 2 * x + rx, ln], axis=[ry, rx]),
                     name="pool")
    s = tdsl.auto_schedule(P, target)
    assert ("pool: vectorize: split(ln," in str(s.explain())) == vectorized, s.explain()
    x = (np.random.default_rng(4).random((2, H, H, lanes)) * 250).astype(dtype)
    out = np.zeros(P.shape, dtype)
    tdsl.build(s, [X, P], target=target)(x, out)
    want = np.max([x[:, ky:ky + 10:2, kx:kx + 10:2] for ky in range(3) for kx in range(3)], axis=0)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape,perm,dtype,tiled", [
    ((1, 14, 16, 32), (0, 3, 1, 2), "float32", True),     # NHWC -> NCHW
    ((1, 32, 14, 16), (0, 2, 3, 1), "float32", True),     # NCHW -> NHWC
    ((48, 40), (1, 0), "uint8", True),
    ((40, 24), (1, 0), "float64", True),
    ((1, 14, 14, 3), (0, 3, 1, 2), "float32", False),     # 3 channels: no square tile
])
def test_transposes_read_square_tiles_without_gathers(target, shape, perm, dtype, tiled):
    """An elementwise stage that reads its input contiguously along another axis than its
    own last one takes square tiles (that axis split and unrolled around the vector loop),
    which the backend reads as rows and transposes in registers: no gather is left."""
    X = tdsl.placeholder(shape, dtype, name="X")
    out_shape = tuple(shape[p] for p in perm)
    inv = [perm.index(d) for d in range(len(perm))]
    Y = tdsl.compute(out_shape, lambda *i: X[tuple(i[inv[d]] for d in range(len(shape)))] + tdsl.const(1, dtype),
                     name="Y")
    s = tdsl.auto_schedule(Y, target)
    assert ("transposed in registers" in str(s.explain())) == tiled, s.explain()
    f = tdsl.build(s, [X, Y], target=target)
    assert not tiled or "gather" not in f.get_source("asm")
    x = (np.random.default_rng(5).random(shape) * 100).astype(dtype)
    out = np.zeros(out_shape, dtype)
    f(x, out)
    np.testing.assert_array_equal(out, x.transpose(perm) + np.array(1, dtype))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("blocks,H,W,C,tiled", [
    (2, 20, 32, 0, True),           # whole blocks and whole tiles: no gather left
    (2, 9, 13, -4, True),           # a partial last block (tiles of 4 channels), ragged rows
    (1, 6, 8, 7, False),            # 7 channels: no square tile, read as before
])
def test_unblocking_reads_square_tiles(target, blocks, H, W, C, tiled):
    """layout.from_blocked's image, out[b, ch, y, x] = xb[b, ch // bn, y, x, ch % bn],
    reads its input contiguously along the channels within a block (`ch % bn`): square
    tiles transposed in registers, as for a transpose, instead of a gather per vector (a
    row's ragged last tile still gathers)."""
    bn = Target(target).vector_lanes("float32")
    C = C if C > 0 else blocks * bn + C      # C <= 0: that many short of whole blocks
    X = tdsl.placeholder((1, blocks, H, W, bn), name="X")
    Y = tdsl.compute((1, C, H, W), lambda b, ch, y, x: X[b, ch // bn, y, x, ch % bn], name="Y")
    s = tdsl.auto_schedule(Y, target)
    assert ("transposed in registers" in str(s.explain())) == tiled, s.explain()
    f = tdsl.build(s, [X, Y], target=target)
    assert not tiled or W % 16 or "gather" not in f.get_source("asm")
    x = _data(1, blocks, H, W, bn)
    out = np.full((1, C, H, W), np.nan, np.float32)
    f(x, out)
    np.testing.assert_array_equal(out, x.transpose(0, 1, 4, 2, 3).reshape(1, blocks * bn, H, W)[:, :C])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("B,M,K,N,epilogue", [
    (1, 256, 300, 288, False),   # a reduction in no whole vectors
    (2, 256, 256, 256, True)])   # batched, an elementwise consumer
def test_long_reduction_over_a_transposed_operand_packs_it_transposed(target, B, M, K, N,
                                                                     epilogue):
    """A @ B.T with a long reduction (a gradient's H @ B.T, a dense layer's x W^T): B's
    panel is copied transposed (transform_layout) and the register tile runs as for A @ B,
    instead of the dot-product tile."""
    t = Target(target)
    A = tdsl.placeholder((B, M, K), name="A")
    Bm = tdsl.placeholder((B, N, K), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((B, M, N), lambda b, i, j: tdsl.sum(A[b, i, k] * Bm[b, j, k], axis=k),
                     name="C")
    Y = tdsl.compute(C.shape, lambda *i: C[i] * 0.5, name="Y") if epilogue else C
    s = tdsl.auto_schedule(Y, target=t)
    rules = s.explain().rules("C")
    assert "register-tile" in rules and "dot-tile" not in rules, s.explain()
    assert any(d.rule == "pack" and d.action.startswith("transform_layout(B")
               for d in s.explain().decisions), s.explain()
    f = tdsl.build(s, [A, Bm, Y], target=t)
    a, b = _data(B, M, K), _data(B, N, K)
    out = np.full((B, M, N), np.nan, np.float32)
    f(a, b, out)
    want = a @ b.transpose(0, 2, 1) * (0.5 if epilogue else 1.0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("M,K,N", [(197, 64, 197), (8, 512, 512), (128, 256, 256), (261, 300, 270)])
def test_short_reduction_or_few_rows_keep_the_dot_product_tile(M, K, N):
    """Attention's Q K^T over a head of 64, few rows or columns, ragged tiles: a
    transposed copy would not pay."""
    A = tdsl.placeholder((M, K), name="A")
    Bm = tdsl.placeholder((N, K), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * Bm[j, k], axis=k), name="C")
    assert "dot-tile" in tdsl.auto_schedule(C).explain().rules("C")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("Z,C,fused", [(12, 2, "z, c"), (3, 1, "x, z, c"), (7, 3, "z, c")])
def test_short_trailing_axes_are_one_contiguous_run(target, Z, C, fused):
    """A bilateral grid's blur along its x axis: cells of Z intensities x C channels, too
    short for a vector each, are one contiguous run of Z * C, vectorized; a cell still too
    short takes the x axis into the run too."""
    X = tdsl.placeholder((9, 14, Z, C), name="X")
    B = tdsl.compute((9, 10, Z, C), lambda y, x, z, c: sum(
        w * X[y, x + k, z, c] for k, w in enumerate((1.0, 4.0, 6.0, 4.0, 1.0))), name="blur")
    s = tdsl.auto_schedule(B, target)
    assert f"blur: vectorize: fuse({fused})" in str(s.explain()), s.explain()
    x = _data(9, 14, Z, C)
    out = np.zeros(B.shape, np.float32)
    tdsl.build(s, [X, B], target=target)(x, out)
    want = sum(w * x[:, k:k + 10] for k, w in enumerate((1.0, 4.0, 6.0, 4.0, 1.0)))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_loop_splits_a_run_time_row_instead_of_fusing_it(target):
    """A channel-blocked max pool (N, 2, W, lanes) with N and W symbolic: two channel
    blocks are too few tasks, and fusing the row itself would cost every output vector a
    division by the run-time width to recover its indices. The row is split into a
    constant number of parts and its outer part fused: only divisions by constants
    remain in the parallel loop, and the pool matches numpy at ragged widths."""
    t = Target(target)
    bn = t.vector_lanes("float32")
    N, W = tdsl.var("N"), tdsl.var("W")
    X = tdsl.placeholder((N, 2, W, bn), name="X")
    k = tdsl.reduce_axis((0, 3), "k")
    O = tdsl.compute((N, 2, (W - 3) // 2 + 1, bn),
                     lambda b, cb, w, c: tdsl.max(X[b, cb, w * 2 + k, c], axis=k), name="O")
    s = tdsl.auto_schedule(O, target=t)
    assert "parallel(fuse(b, cb, w.outer))" in str(s.explain()), s.explain()
    body = [ln for ln in str(tdsl.lower(s, [X, O])).splitlines() if "pragma" not in ln]
    runtime_div = [ln for ln in body if re.search(r"(//|%) \(*[A-Za-z]", ln)]
    assert not runtime_div, runtime_div
    f = tdsl.build(s, [X, O], target=t)
    for n, w in [(1, 3), (1, 40), (3, 101), (2, 8)]:
        x = _data(n, 2, w, bn)
        ow = (w - 3) // 2 + 1
        ref = np.max([x[:, :, i:i + 2 * ow - 1:2] for i in range(3)], axis=0)
        out = np.full(ref.shape, np.nan, np.float32)
        f(x, out)
        np.testing.assert_array_equal(out, ref)
