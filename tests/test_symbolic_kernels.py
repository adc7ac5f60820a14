"""Kernels of symbolic sizes keep the shape of the static ones (issue: networks of any
size): no bounds guard in the main loop of a stage computed at a fused loop, no division
by a run-time size per vector, and no fork-join where the sizes of a call leave too little
work for one. Results are compared with numpy and onnxruntime at several sizes."""
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import tdsl
import tdsl.graph as G
from tdsl import arith
from tdsl.graph import models
from tdsl.runtime import threadpool


def _launches():
    return threadpool.stats().get("launches", 0)


def _main_part(text):
    """The lowered text up to the tail that loop partitioning peels off (a loop whose
    range starts at a run-time size)."""
    m = re.search(r"\n\s*for \S+ in range\(\w+ // \d+, ", text)
    return text[:m.start()] if m else text


def test_remainder_of_a_fixed_fused_index_stays_a_remainder():
    """A fused loop's index at one iteration, `f // 2 % 4`, bounds to itself: written
    `f // 2 - f // 8 * 4` its two terms bound independently and nothing about it could
    be proven once `f`'s extent is a run-time size."""
    b = tdsl.size_var("batch")
    f = tdsl.var("f")
    lo, hi = arith.bound(f // 2 % 4)
    assert str(lo) == str(hi) == "f // 2 % 4", (lo, hi)
    ranges = {f: (0, b * 8)}
    assert arith.can_prove(f // 2 % 4 >= 0, ranges) and arith.can_prove(f // 2 % 4 < 4, ranges)
    x = tdsl.var("x")
    lo, hi = arith.bound((x * 8 + 1) % 4)               # a constant remainder still folds
    assert (lo.value, hi.value) == (1, 1)


def _batch_matmul(n, s, heads=4, d=64):
    a = tdsl.placeholder((n, heads, s, s), name="a")
    w = tdsl.placeholder((n, heads, s, d), name="w")
    k = tdsl.reduce_axis((0, s), "k")
    c = tdsl.compute((n, heads, s, d), lambda b, h, i, j: tdsl.sum(a[b, h, i, k] * w[b, h, k, j], axis=k),
                     name="c")
    return a, w, c


def test_stage_at_a_fused_loop_of_symbolic_extent_has_no_guard():
    """attn @ V with symbolic batch and sequence, its register tile computed at a loop
    fused from (batch, heads, column block): the main part of the row loop carries no
    guard, as the static kernel's; the results match numpy at several sizes."""
    n, s = tdsl.size_var("n"), tdsl.size_var("s")
    a, w, c = _batch_matmul(n, s)
    sch = tdsl.auto_schedule(c, "llvm")
    text = str(tdsl.lower(sch, [a, w, c]))
    assert "parallel" in text
    assert "likely" not in _main_part(text), text
    f = tdsl.build(sch, [a, w, c], target="llvm")
    rng = np.random.default_rng(0)
    for N, S in [(1, 1), (1, 13), (2, 64)]:
        x = rng.standard_normal((N, 4, S, S)).astype(np.float32)
        y = rng.standard_normal((N, 4, S, 64)).astype(np.float32)
        out = np.zeros((N, 4, S, 64), np.float32)
        f(x, y, out)
        np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)


def test_elementwise_parallel_loop_stops_at_an_inner_symbolic_extent():
    """A head split (batch, sequence, 256) -> (batch, 4, sequence, 64): the parallel loop
    fuses (batch, heads) with the sequence, whole or split into a constant number of parts
    (autosched parallel_prefix), not the vector loop inside, whose index would cost a
    division by the sequence per vector."""
    n, s = tdsl.size_var("n"), tdsl.size_var("s")
    x = tdsl.placeholder((n, s, 256), name="x")
    y = tdsl.compute((n, 4, s, 64), lambda b, h, i, j: x[b, i, h * 64 + j] * 0.125, name="y")
    sch = tdsl.auto_schedule(y, "llvm")
    text = str(tdsl.lower(sch, [x, y]))
    par = next(line for line in text.splitlines() if "parallel" in line)
    assert re.search(r"in parallel\((n \* s \* 4|s \* n \* 4|n \* \d+)\)", par), text
    assert re.search(r"for j\.inner in vectorized\(\d+\)", text), text
    f = tdsl.build(sch, [x, y], target="llvm")
    for N, S in [(1, 1), (2, 37)]:
        a = np.random.default_rng(S).standard_normal((N, S, 256)).astype(np.float32)
        out = np.zeros((N, 4, S, 64), np.float32)
        f(a, out)
        np.testing.assert_allclose(out, a.reshape(N, S, 4, 64).transpose(0, 2, 1, 3) * 0.125, rtol=1e-6)


def test_parallel_when_forks_only_when_it_holds():
    n = tdsl.size_var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: tdsl.sin(A[i]) * 2.0, name="B")
    s = tdsl.create_schedule(B)
    io, _ = s[B].split(B.op.axis[0], factor=64)
    s[B].parallel(io)
    s[B].pragma(io, "parallel_when", n >= 4096)
    assert "parallel_when" in str(tdsl.lower(s, [A, B]))
    f = tdsl.build(s, [A, B])
    f.set_num_threads(2)
    for size, forks in [(100, False), (1 << 16, True), (1, False)]:
        a = np.random.default_rng(size).standard_normal(size).astype(np.float32)
        b = np.zeros_like(a)
        before = _launches()
        f(a, b)
        np.testing.assert_allclose(b, np.sin(a) * 2.0, rtol=1e-5, atol=1e-6)
        if threadpool.load_into_jit():
            assert (_launches() > before) == forks, (size, threadpool.stats())
    with pytest.raises(tdsl.ScheduleError, match="parallel_when"):
        s[B].pragma(io, "parallel_when", n * 2)


def _mlp():
    return models.mlp(batch="batch", sizes=(256, 512, 256))


def test_symbolic_network_forks_only_at_sizes_with_the_work():
    """A network built once for any batch: its kernels' parallel loops fork at a batch
    whose work a static build would split between the cores, and run on the calling
    thread at a batch of one, as a static build of that batch does."""
    model = _mlp()
    exe = G.build(G.optimize(G.from_onnx(model)))
    for batch, forks in [(1, False), (256, True)]:
        x = np.random.default_rng(batch).standard_normal((batch, 256)).astype(np.float32)
        out = exe.run(x)[0]
        before = _launches()
        out = exe.run(x)[0]
        ref = models.onnxruntime_run(model, {"input": x})[0]
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
        if threadpool.load_into_jit():
            assert (_launches() > before) == forks, (batch, threadpool.stats())


def test_static_kernels_carry_no_run_time_test():
    """A static schedule decides at build: no parallel_when pragma."""
    x = tdsl.placeholder((8, 128, 256), name="x")
    y = tdsl.compute((8, 4, 128, 64), lambda b, h, i, j: x[b, i, h * 64 + j] * 0.125, name="y")
    text = str(tdsl.lower(tdsl.auto_schedule(y, "llvm"), [x, y]))
    assert "parallel" in text and "parallel_when" not in text


def _lowered_group(model):
    """The loop IR of the only kernel of `model`, scheduled as the executor schedules it
    for symbolic sizes (representative sizes for the schedule's choices)."""
    from tdsl.graph.ir import Const, Function
    from tdsl.graph.strategy import dispatch, topi
    from tdsl.graph.strategy.groupdef import GroupDef
    from tdsl.graph.strategy.symbolic import representative
    fused = G.fuse_ops(G.passes.specialize(G.optimize(G.from_onnx(model)), "llvm"))
    (call,) = [n for n in fused.main.nodes() if isinstance(n.op, Function)]
    g = GroupDef(call.op, {i: a.data for i, a in enumerate(call.args) if isinstance(a, Const)}, "llvm")
    token = topi.representative.set(representative(g.sizes.vars))
    token2 = topi.symbolic_sizes.set(True)
    try:
        out = g.build()
        _, args, _ = dispatch.kernel_args(g, out)
        s = tdsl.create_schedule(out)
        dispatch.SCHEDULES["llvm"](s, out, g)
        return str(tdsl.lower(s, args))
    finally:
        topi.symbolic_sizes.reset(token2)
        topi.representative.reset(token)


def test_softmax_rows_of_symbolic_length_divide_by_no_run_time_size():
    """A softmax over [batch, heads, seq, seq] fuses its rows into one loop f; the row's
    offset, written S*S*(f//S//4)*4 + S*(f%S) + S*S*(f//S%4), is S*f, and the kernel
    divides by no run-time size (a division per row, as much as the short rows' work);
    the network matches onnxruntime at several sizes."""
    pytest.importorskip("onnxruntime")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "seq", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                                                "softmax", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    text = _lowered_group(model)
    assert "seq * i0.i1.fused.i2.fused +" in text, text
    assert not re.search(r"[/%] (seq|batch)\b", text), text
    exe = G.build(G.optimize(G.from_onnx(model)))
    rng = np.random.default_rng(0)
    for b, s in [(1, 1), (1, 16), (2, 19), (1, 70)]:
        feed = rng.standard_normal((b, 4, s, s)).astype(np.float32)
        np.testing.assert_allclose(exe.run(feed)[0], models.onnxruntime_run(model, {"x": feed})[0],
                                   rtol=1e-5, atol=1e-6)


def test_onnx_attention_dynamic_matches_onnxruntime():
    """Q @ K^T, softmax, @ V with symbolic batch and sequence, at sizes with and without
    tails, against onnxruntime; below a register tile's rows (a few tokens) the matmuls
    run their variants tiled for one row; below the representative 64 tokens, Q @ K^T
    (whose vectors run along the sequence) and the softmax run their "short" variants,
    one vector a step, and @ V (whose vectors run along the head) its plain kernel; at a
    single token the first two run variants compiled for a sequence of exactly 1. (The
    sequence is bounded below MIN_KEYS, so the three kernels stay; unbounded, they would
    be one `nn.attention`, tests/test_graph_attention_dynamic.py.)"""
    pytest.importorskip("onnxruntime")
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", 4, "seq", 64])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", 4, 64, "seq"])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", 4, "seq", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "attn", [q, k, v], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    exe = G.build(G.optimize(G.from_onnx(model, dims={"seq": (1, 128)})))
    rng = np.random.default_rng(0)
    for b, s in [(1, 1), (1, 19), (2, 64), (1, 16), (2, 70), (2, 1), (1, 3)]:
        feeds = {"q": rng.standard_normal((b, 4, s, 64)).astype(np.float32),
                 "k": rng.standard_normal((b, 4, 64, s)).astype(np.float32),
                 "v": rng.standard_normal((b, 4, s, 64)).astype(np.float32)}
        out = exe.run(feeds["q"], feeds["k"], feeds["v"])[0]
        ref = models.onnxruntime_run(model, feeds)[0]
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
        names = [n.split("#")[0] for n, _, _ in sorted(exe.profile(number=1), key=lambda r: int(r[0].split("#")[1]))]
        got = [next((c for c in ("small", "short", "one") if n.endswith("_" + c)), "") for n in names]
        short = "one" if s == 1 else "short" if s < 64 else ""
        assert got == ["small" if 1 < s < 8 else short, short, "small" if s < 8 else ""], (s, names)


def test_dense_size_classes_run_their_variants():
    """A dense layer's kernel of symbolic rows is tiled for many rows, the column blocks
    outside; at fewer rows than a tile (one token) the variant tiled for one row runs,
    and the profile names it; more rows than columns take the kernel itself (no variant
    with the row blocks outside: it ran no faster)."""
    model = _mlp()
    exe = G.build(G.optimize(G.from_onnx(model)))
    for batch, want in [(1, ["small", "small"]), (3, ["small", "small"]), (64, ["", ""]),
                        (300, ["", ""]), (600, ["", ""]), (1, ["small", "small"])]:
        x = np.random.default_rng(batch).standard_normal((batch, 256)).astype(np.float32)
        out = exe.run(x)[0]
        ref = models.onnxruntime_run(model, {"input": x})[0]
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
        names = [name for name, _, _ in sorted(exe.profile(number=1), key=lambda r: int(r[0].split("#")[1]))]
        dense = [n.split("#")[0] for n in names if "dense" in n]
        got = ["small" if n.endswith("_small") else "" for n in dense]
        assert got == want, (batch, names)


def test_transpose_with_symbolic_columns_reads_square_tiles():
    """K^T of a head split, (batch, seq, 256) -> (batch, 4, 64, seq): read in 16 x 16
    tiles transposed in registers, as the static schedule does, the sequence's ragged
    last tile peeled off."""
    n, s = tdsl.size_var("n"), tdsl.size_var("s")
    x = tdsl.placeholder((n, s, 256), name="x")
    y = tdsl.compute((n, 4, 64, s), lambda b, h, d, i: x[b, i, h * 64 + d] * 0.125, name="y")
    sch = tdsl.auto_schedule(y, "llvm")
    assert "vectorize" in sch.explain().rules("y")
    assert "transposed in registers" in str(sch.explain()), str(sch.explain())
    f = tdsl.build(sch, [x, y], target="llvm")
    for N, S in [(1, 1), (2, 37), (1, 64)]:
        a = np.random.default_rng(S).standard_normal((N, S, 256)).astype(np.float32)
        out = np.zeros((N, 4, 64, S), np.float32)
        f(a, out)
        np.testing.assert_allclose(out, a.reshape(N, S, 4, 64).transpose(0, 2, 3, 1) * 0.125, rtol=1e-6)


def test_ragged_tail_of_a_transpose_tile_is_rolled():
    """The peeled tail of a run-time extent runs once per row: its guarded tile of
    gathered vectors (16 with AVX-512) is one rolled loop, not a copy per vector (the
    main part keeps its unrolled tile); results match numpy at sizes in and out of the
    tail."""
    n, s = tdsl.size_var("n"), tdsl.size_var("s")
    x = tdsl.placeholder((n, s, 256), name="x")
    y = tdsl.compute((n, 4, 64, s), lambda b, h, d, i: x[b, i, h * 64 + d] * 0.125, name="y")
    sch = tdsl.auto_schedule(y, "llvm")
    text = str(tdsl.lower(sch, [x, y]))
    main, tail = _main_part(text), text[len(_main_part(text)):]
    assert re.search(r"unroll\(\d+\)", main) and "likely" not in main, text
    assert "likely" in tail and "unroll(" not in tail, text
    f = tdsl.build(sch, [x, y], target="llvm")
    assert f.get_source("asm").count("vgatherdps") <= 1
    for N, S in [(1, 1), (1, 13), (2, 37), (1, 64), (3, 100)]:
        a = np.random.default_rng(S).standard_normal((N, S, 256)).astype(np.float32)
        out = np.full((N, 4, 64, S), np.nan, np.float32)
        f(a, out)
        np.testing.assert_array_equal(out, a.reshape(N, S, 4, 64).transpose(0, 2, 3, 1) * np.float32(0.125))


def test_tail_of_a_register_tile_stays_unrolled():
    """A register tile's tail reads and writes its partial sums (an allocation): its
    rows stay unrolled, or the sums would leave registers in the main loop too."""
    m = tdsl.size_var("m")
    a = tdsl.placeholder((m, 64), name="a")
    w = tdsl.placeholder((64, 48), name="w")
    k = tdsl.reduce_axis((0, 64), "k")
    c = tdsl.compute((m, 48), lambda i, j: tdsl.sum(a[i, k] * w[k, j], axis=k), name="c")
    sch = tdsl.auto_schedule(c, "llvm")
    text = str(tdsl.lower(sch, [a, w, c]))
    tail = text[len(_main_part(text)):]
    assert "likely" in tail and "unroll(" in tail, text
    f = tdsl.build(sch, [a, w, c], target="llvm")
    rng = np.random.default_rng(3)
    wv = rng.standard_normal((64, 48)).astype(np.float32)
    for M in (1, 7, 13, 40):
        av = rng.standard_normal((M, 64)).astype(np.float32)
        out = np.zeros((M, 48), np.float32)
        f(av, wv, out)
        np.testing.assert_allclose(out, av @ wv, rtol=1e-4, atol=1e-4)


def test_tail_of_a_tile_allocated_in_it_over_unrolled_taps_is_rolled():
    """A depthwise conv's tile of partial sums allocated per tile of a run-time row and
    summed over unrolled taps only: its tail, the row's last tile, has its own copy of
    the tile, each sum touched a constant number of times, so its guarded pixels and
    taps are rolled loops (a fraction of the unrolled copies' code to compile); the main
    part keeps its unrolled tile, and results match numpy in and out of the tail."""
    n = tdsl.size_var("n")
    x = tdsl.placeholder((n + 4, 16), name="x")
    w = tdsl.placeholder((5, 16), name="w")
    kx = tdsl.reduce_axis((0, 5), "kx")
    conv = tdsl.compute((n, 16), lambda i, c: tdsl.sum(x[i + kx, c] * w[kx, c], axis=kx), name="conv")
    y = tdsl.compute((n, 16), lambda i, c: tdsl.max(conv[i, c], tdsl.const(0.0, "float32")), name="y")
    s = tdsl.create_schedule(y)
    io, ii = s[y].split(y.op.axis[0], factor=8)
    s[y].vectorize(y.op.axis[1])
    s[conv].compute_at(s[y], io)
    i, c = s[conv].op.axis
    s[conv].reorder(kx, i, c)
    s[conv].unroll(kx)
    s[conv].unroll(i)
    s[conv].vectorize(c)
    text = str(tdsl.lower(s, [x, w, y]))
    main, tail = _main_part(text), text[len(_main_part(text)):]
    assert re.search(r"unroll\(8\)", main) and re.search(r"unroll\(5\)", main) and "likely" not in main, text
    assert "likely" in tail and "allocate" in tail and "unroll(" not in tail, text
    f = tdsl.build(s, [x, w, y], target="llvm")
    rng = np.random.default_rng(5)
    wv = rng.standard_normal((5, 16)).astype(np.float32)
    for N in (1, 3, 8, 13, 64, 70):
        xv = rng.standard_normal((N + 4, 16)).astype(np.float32)
        out = np.full((N, 16), np.nan, np.float32)
        f(xv, wv, out)
        ref = sum(xv[k:k + N] * wv[k] for k in range(5))
        np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-5, atol=1e-5)


def test_gather_at_positions_computed_from_its_input_has_no_short_classes():
    """Position ids computed elementwise from the token ids (RoBERTa's, over batch x
    sequence) are inlined into the embedding gather, whose vectors run along the constant
    hidden size: the sequence decides no block of it, so it gets no "short" or "one"
    variant, and is right at every size (onnxruntime)."""
    pytest.importorskip("onnxruntime")
    table = np.random.default_rng(3).standard_normal((40, 256)).astype(np.float32)
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])
    nodes = [helper.make_node("Mul", ["ids", "two"], ["m"]),
             helper.make_node("Add", ["m", "one"], ["pos"]),
             helper.make_node("Gather", ["table", "pos"], ["y"], axis=0)]
    init = [helper.make_tensor("two", TensorProto.INT64, [], [2]),
            helper.make_tensor("one", TensorProto.INT64, [], [1]),
            helper.make_tensor("table", TensorProto.FLOAT, table.shape, table.ravel().tolist())]
    model = helper.make_model(helper.make_graph(nodes, "positions", [ids], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, None)], initializer=init), opset_imports=[helper.make_opsetid("", 17)])
    exe = G.build(G.optimize(G.from_onnx(model)))
    ((k, _, _),) = exe.steps
    assert k.variants == [], [v.name for _, v in k.variants]
    rng = np.random.default_rng(4)
    for b, s in [(1, 1), (1, 16), (2, 70), (3, 5)]:
        x = rng.integers(0, 19, (b, s)).astype(np.int64)
        np.testing.assert_array_equal(exe.run(x)[0], models.onnxruntime_run(model, {"ids": x})[0])


def _rows_kernel(n):
    """B[i, j] = A[i, j] * 2 + 1 over `n` rows of 64, the rows a serial loop, each row
    four 16-lane vectors."""
    A = tdsl.placeholder((n, 64), name="A")
    B = tdsl.compute((n, 64), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = tdsl.create_schedule(B)
    s[B].vectorize(s[B].split(B.op.axis[1], 16)[1])
    return s, [A, B]


def test_loops_over_run_time_sizes_are_not_runtime_unrolled_by_llvm():
    """A loop whose bounds read a run-time size carries loop metadata that keeps LLVM from
    unrolling it by a run-time count (remainder loops that cost build time and bought no
    speed); a loop of constant extent carries none, and the results match numpy."""
    from tdsl.codegen import llvm as L
    from tdsl.lower import build_passes
    for n, marked in ((tdsl.var("n"), True), (12, False)):
        s, args = _rows_kernel(n)
        text, _, _ = L.codegen(build_passes(tdsl.lower(s, args, "rows"), False), "llvm")
        assert ("llvm.loop.unroll.runtime.disable" in text) == marked, n
    s, args = _rows_kernel(tdsl.var("n"))
    _check_twice_plus_one(tdsl.build(s, args), (1, 7, 40))


def _check_twice_plus_one(f, rows_list):
    """`f(a, b)` computes b = 2a + 1 over (rows, 64) at each row count, as numpy does."""
    for rows in rows_list:
        a = np.random.default_rng(rows).standard_normal((rows, 64)).astype("float32")
        b = np.zeros_like(a)
        f(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_a_loop_that_forks_only_when_worth_it_keeps_one_copy_of_its_body():
    """A parallel loop with a run-time test of its work ("parallel_when") calls its body
    function from the serial path as well as from the pool's task: the body is `noinline`
    so LLVM compiles its loop nest once; a parallel loop without the test keeps its body
    inlinable; the results match numpy on both paths (few rows: serial, many: forked)."""
    from tdsl.codegen import llvm as L
    from tdsl.codegen.llvm import jit
    from tdsl.lower import build_passes
    from tdsl.target import llvm_binding

    def kernel(n, when):
        A = tdsl.placeholder((n, 64), name="A")
        B = tdsl.compute((n, 64), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
        s = tdsl.create_schedule(B)
        i, j = B.op.axis
        s[B].parallel(i)
        if when:
            s[B].pragma(i, "parallel_when", n * 64 >= 4096)
        s[B].vectorize(s[B].split(j, 16)[1])
        return s, [A, B]

    def body_copies(s, args):
        text, _, _ = L.codegen(build_passes(tdsl.lower(s, args, "rows"), False), "llvm")
        body = re.search(r'define internal i32 @"(tdsl_rows_par\d+_body)"[^\n]*', text)
        mod = llvm_binding().parse_assembly(text)
        mod.triple = L.parse_target("llvm").triple
        jit.optimize(llvm_binding(), mod, L.parse_target("llvm"))
        opt = str(mod)
        # a body inlined into both callers is gone from the optimised module
        return "noinline" in body.group(0), re.search(rf'define internal [^@]*@"?{body.group(1)}\b', opt) is not None

    n = tdsl.var("n")
    assert body_copies(*kernel(n, True)) == (True, True)
    assert body_copies(*kernel(n, False))[0] is False
    _check_twice_plus_one(tdsl.build(*kernel(n, True)), (1, 3, 200))


def test_index_terms_repeated_by_an_unrolled_tile_are_emitted_once_the_same_code():
    """The unrolled steps of a register tile over run-time strides index with the same
    terms again and again; the emitter reuses a pure term already emitted in its block
    with the same bindings instead of walking it again: the IR is the one a walk of every
    term gives (no term reused across a load, a block or other bindings), in fewer walks,
    and the kernel matches numpy."""
    from tdsl.codegen import llvm as L
    from tdsl.codegen.llvm import exprs
    from tdsl.lower import build_passes

    def kernel():
        n, m = tdsl.var("n"), tdsl.var("m")
        A = tdsl.placeholder((n, m), name="A")
        B = tdsl.placeholder((m, 32), name="B")
        k = tdsl.reduce_axis((0, m), name="k")
        C = tdsl.compute((n, 32), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = tdsl.create_schedule(C)
        i, j = C.op.axis
        io, ii = s[C].split(i, 4)
        jo, ji = s[C].split(j, 16)
        s[C].reorder(io, jo, k, ii, ji)
        s[C].unroll(ii)
        s[C].vectorize(ji)
        return s, [A, B, C]

    calls = []
    walk = exprs.ExprEmitter._wide_index

    def counted(self, e):
        calls.append(e)
        return walk(self, e)

    def ir_text(memo):
        calls.clear()
        s, args = kernel()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(exprs.ExprEmitter, "_wide_index", counted)
            if not memo:
                mp.setattr(exprs.ExprEmitter, "_pure_index_vars", lambda self, e: None)
            text = L.codegen(build_passes(tdsl.lower(s, args, "mm"), False), "llvm")[0]
        return text, len(calls)

    with_memo, walked = ir_text(True)
    without, walked_all = ir_text(False)
    assert with_memo == without
    assert walked < 0.75 * walked_all, (walked, walked_all)
    f = tdsl.build(*kernel())
    rng = np.random.default_rng(0)
    for rows, depth in ((1, 3), (7, 16), (10, 33)):
        a = rng.standard_normal((rows, depth)).astype("float32")
        b = rng.standard_normal((depth, 32)).astype("float32")
        c = np.zeros((rows, 32), "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
