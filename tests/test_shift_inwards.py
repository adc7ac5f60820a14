"""split(..., tail="shift"), Halide's ShiftInwards: the last tile of a run-time extent
moves back to end at the extent, so a ragged extent costs no guarded copy of the tile;
only pure stages may be shifted. Results against numpy and onnxruntime at ragged sizes."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph import models

F = 6


def _scaled(parallel=False):
    n = tdsl.var("n")
    A = tdsl.placeholder((n, 40), name="A")
    B = tdsl.compute((n, 40), lambda i, j: A[i, j] * 2 + 1, name="B")
    s = tdsl.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=F, tail="shift")
    jo, ji = s[B].split(B.op.axis[1], factor=16, tail="shift")
    s[B].reorder(io, jo, ii, ji)
    s[B].unroll(ii)
    s[B].vectorize(ji)
    if parallel:
        s[B].parallel(io)
    return s, A, B


@pytest.mark.parametrize("parallel", [False, True])
def test_shifted_tiles_match_numpy_at_ragged_sizes(parallel):
    s, A, B = _scaled(parallel)
    text = str(tdsl.lower(s, [A, B]))
    # one copy of the tile and no guard: the ragged tail is the shifted last tile
    assert "likely" not in text and text.count("unroll(6)") == 1
    f = tdsl.build(s, [A, B], target="llvm")
    rng = np.random.default_rng(0)
    for m in (F, F + 1, 2 * F - 1, 2 * F, 2 * F + 3, 5 * F + 1, 97):
        a = rng.standard_normal((m, 40)).astype("float32")
        b = np.full_like(a, np.nan)
        f(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_a_strided_extent_shifts_with_a_constant_tile():
    """A strided window's output, (n - 3) // 4 + 1 wide, shifted by tiles of F with its
    accumulator computed per tile and unrolled (the blocked conv's): the code may assume
    n >= 4F - 1, where the extent reaches a tile (exactly there, both ways proven), so the
    accumulator's region is F wide and unguarded. Right from the first such n on."""
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    k = tdsl.reduce_axis((0, 3), "k")
    W = (n - 3) // 4 + 1
    S = tdsl.compute((W,), lambda i: tdsl.sum(A[i * 4 + k], axis=k), name="S")
    O = tdsl.compute((W,), lambda i: S[i] * 2, name="O")
    s = tdsl.create_schedule(O.op)
    acc = S
    io, ii = s[O].split(O.op.axis[0], factor=F, tail="shift")
    s[acc].compute_at(s[O], io)
    s[acc].unroll(acc.op.axis[0])
    text = str(tdsl.lower(s, [A, O]))
    assert "likely" not in text and "unroll(6)" in text
    f = tdsl.build(s, [A, O], target="llvm")
    rng = np.random.default_rng(0)
    for m in (4 * F - 1, 4 * F, 4 * F + 5, 97):
        a = rng.standard_normal(m).astype("float32")
        w = (m - 3) // 4 + 1
        o = np.full(w, np.nan, "float32")
        f(a, o)
        want = 2 * (a[0:4 * w:4] + a[1:4 * w:4] + a[2:4 * w:4])
        np.testing.assert_allclose(o, want, rtol=1e-5)


def test_a_reduction_axis_is_not_shifted():
    n = tdsl.var("n")
    A = tdsl.placeholder((8, n), name="A")
    k = tdsl.reduce_axis((0, n), "k")
    S = tdsl.compute((8,), lambda i: tdsl.sum(A[i, k], axis=k), name="S")
    s = tdsl.create_schedule(S.op)
    with pytest.raises(tdsl.ScheduleError, match="S.*reduction axis"):
        s[S].split(k, factor=4, tail="shift")


def test_a_stage_reducing_into_its_output_is_not_shifted():
    n = tdsl.var("n")
    A = tdsl.placeholder((n, 16), name="A")
    k = tdsl.reduce_axis((0, 16), "k")
    S = tdsl.compute((n,), lambda i: tdsl.sum(A[i, k], axis=k), name="S")
    s = tdsl.create_schedule(S.op)
    with pytest.raises(tdsl.ScheduleError, match="reduces into its output"):
        s[S].split(S.op.axis[0], factor=4, tail="shift")
    # its reduction cached in a local tile: the copy out of it is pure, and shifts
    L = s.cache_write(S, "local")
    io, ii = s[S].split(S.op.axis[0], factor=4, tail="shift")
    s[L].compute_at(s[S], io)
    f = tdsl.build(s, [A, S], target="llvm")
    for m in (4, 5, 7, 9, 30):
        a = np.random.default_rng(m).standard_normal((m, 16)).astype("float32")
        out = np.zeros(m, "float32")
        f(a, out)
        np.testing.assert_allclose(out, a.sum(1), rtol=1e-5, atol=1e-5)


def test_updates_are_not_shifted():
    n = tdsl.var("n")
    V = tdsl.placeholder((n,), name="V")
    h = tdsl.compute((n,), lambda i: V[i], name="h")
    r = tdsl.reduce_axis((1, n), "r")
    u = tdsl.update(h, lambda: r, lambda old: old + h[r - 1], axis=r)
    s = tdsl.create_schedule(u.op)
    with pytest.raises(tdsl.ScheduleError, match="has updates"):
        s[h].split(h.op.axis[0], factor=4, tail="shift")
    with pytest.raises(tdsl.ScheduleError, match="tail must be"):
        s[h].split(h.op.axis[0], factor=4, tail="round")
    with pytest.raises(tdsl.ScheduleError, match="needs factor"):
        s[h].split(h.op.axis[0], nparts=4, tail="shift")


def test_dense_rows_shifted_match_onnxruntime_at_every_size():
    """A dense layer's register tile over a run-time number of rows: the default kernel
    and the "rows" one (more rows than columns) shift their last row tile; fewer rows
    than a tile run the "small" kernel. Sizes around every tile boundary."""
    m = models.mlp(batch="batch", sizes=(64, 24, 10))
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(3)
    for n in list(range(1, 20)) + [23, 24, 25, 31, 33, 47, 61]:
        x = rng.standard_normal((n, 64)).astype(np.float32)
        out = exe.run(x)[0]
        ref = models.onnxruntime_run(m, {"input": x})[0]
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def _attention_model():
    """softmax(Q K^T) V over a symbolic sequence: the auto-scheduler's register tiles
    of Q K^T (rows and columns the sequence) and of the product with V."""
    from onnx import TensorProto, helper
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", 2, "seq", 32])
    kt = helper.make_tensor_value_info("kt", TensorProto.FLOAT, ["batch", 2, 32, "seq"])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", 2, "seq", 32])
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("s", "o")]
    g = helper.make_graph(nodes, "attn", [q, kt, v], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_attention_tiles_shifted_match_onnxruntime_at_every_size():
    """Sizes around the row tile (8), the short class's column vector (16), the main
    kernel's column tile and `REPRESENTATIVE` (64), where the main kernel starts."""
    m = _attention_model()
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(5)
    for seq in (1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 71, 97):
        for batch in (1, 2) if seq in (9, 65) else (1,):
            feeds = {"q": rng.standard_normal((batch, 2, seq, 32)).astype(np.float32),
                     "kt": rng.standard_normal((batch, 2, 32, seq)).astype(np.float32),
                     "v": rng.standard_normal((batch, 2, seq, 32)).astype(np.float32)}
            outs = exe.run(feeds["q"], feeds["kt"], feeds["v"])
            refs = models.onnxruntime_run(m, feeds)
            for out, ref in zip(outs, refs):
                np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def test_a_stage_attached_to_part_of_an_axis_keeps_its_guard():
    """B computed inside C's 8-row tiles covers 4 or 5 of its rows there (C reads
    B[i // 2]): its split by 8 asked to shift would run past that region, so there the
    split is guarded (bound.shifts), and stays right."""
    n = tdsl.var("n")
    A = tdsl.placeholder((n, 16), name="A")
    B = tdsl.compute((n, 16), lambda i, j: A[i, j] * 2, name="B")
    C = tdsl.compute((n, 16), lambda i, j: B[i // 2, j] + 1, name="C")
    s = tdsl.create_schedule(C.op)
    co, ci = s[C].split(C.op.axis[0], factor=8, tail="shift")
    s[B].split(B.op.axis[0], factor=8, tail="shift")
    s[B].compute_at(s[C], co)
    f = tdsl.build(s, [A, C], target="llvm")
    for m in (8, 9, 13, 16, 21, 40):
        a = np.random.default_rng(m).standard_normal((m, 16)).astype("float32")
        out = np.zeros_like(a)
        f(a, out)
        np.testing.assert_allclose(out, a[np.arange(m) // 2] * 2 + 1, rtol=1e-6)


def test_auto_schedule_shifts_tiles_its_params_make_whole():
    """params "least": the rules' register tile over rows known to be at least 64 shifts
    its last tile (no guard); without it, the tile keeps its guarded tail."""
    n = tdsl.var("n")
    A = tdsl.placeholder((n, 32), name="A")
    W = tdsl.placeholder((32, 48), name="W")
    k = tdsl.reduce_axis((0, 32), "k")
    C = tdsl.compute((n, 48), lambda i, j: tdsl.sum(A[i, k] * W[k, j], axis=k), name="C")
    shifted = tdsl.auto_schedule(C, target="llvm", params={"least": {"n": 64}})
    guarded = tdsl.auto_schedule(C, target="llvm")
    assert "tail=shift" in "\n".join(shifted.trace)
    assert "tail=shift" not in "\n".join(guarded.trace)
    assert "likely" not in str(tdsl.lower(shifted, [A, W, C]))
    f = tdsl.build(shifted, [A, W, C], target="llvm")
    rng = np.random.default_rng(7)
    w = rng.standard_normal((32, 48)).astype("float32")
    for m in (64, 65, 71, 100):
        a = rng.standard_normal((m, 32)).astype("float32")
        out = np.zeros((m, 48), "float32")
        f(a, w, out)
        np.testing.assert_allclose(out, a @ w, rtol=1e-4, atol=1e-4)


def test_a_stage_its_readers_ask_past_the_end_of_is_cut_and_shifted():
    """C sums B's rows in blocks of 64 with a guarded last block, so it asks for B up to
    a multiple of 64, past B's end: B's region is cut to its tensor (bound), which its
    split then covers whole and shifts, with no guard and a buffer of n, not of the
    blocks' multiple."""
    n = tdsl.var("n")
    A = tdsl.placeholder((4, n), name="A")
    B = tdsl.compute((4, n), lambda r, j: A[r, j] * 2, name="B")
    k = tdsl.reduce_axis((0, n), "k")
    C = tdsl.compute((4,), lambda r: tdsl.sum(B[r, k], axis=k), name="C")
    s = tdsl.create_schedule(C.op)
    s[C].split(C.op.reduce_axis[0], factor=64)
    s[B].compute_at(s[C], C.op.axis[0])
    _, bi = s[B].split(B.op.axis[1], factor=16, tail="shift")
    s[B].vectorize(bi)
    lines = str(tdsl.lower(s, [A, C])).splitlines()
    b_part = lines[:[i for i, ln in enumerate(lines) if "C[r] = 0" in ln][0]]
    assert "B = allocate((n), " in "\n".join(b_part) and not any("likely" in ln for ln in b_part)
    assert any("max(min(j.outer * 16, n - 16), 0)" in ln for ln in b_part)
    f = tdsl.build(s, [A, C], target="llvm")
    for m in (16, 17, 63, 64, 65, 130):
        a = np.random.default_rng(m).standard_normal((4, m)).astype("float32")
        out = np.zeros(4, "float32")
        f(a, out)
        np.testing.assert_allclose(out, (a * 2).sum(1), rtol=1e-5, atol=1e-5)
