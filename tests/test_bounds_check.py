"""Accesses outside their buffer are skipped and reported as a BoundsError naming the
kernel, the buffer, the index and the extent (issue 21, item 2): in every build for an
index read from memory (a gather), and with build(..., bounds_check=True) for every
access the loop ranges do not prove inside."""
import numpy as np
import pytest

import tdsl
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.runtime import cuda as rcuda
from tdsl.runtime.ndarray import opencl

N = 64


def _opencl_or_skip():
    pytest.importorskip("pyopencl")
    if not opencl(0).exist:
        pytest.skip("no OpenCL device")
    from tdsl.runtime import opencl as rocl
    reason = rocl.unusable_reason()
    if reason:
        pytest.skip("no working OpenCL device: " + reason.splitlines()[0])


def gather(schedule="plain", n=N):
    """B[i] = A[I[i]] * 2: the indices come from memory, no proof can hold."""
    A = tdsl.placeholder((n,), name="A")
    I = tdsl.placeholder((n,), name="I", dtype="int32")
    B = tdsl.compute((n,), lambda i: A[I[i]] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    i = B.op.axis[0]
    if schedule == "vector":
        s[B].vectorize(s[B].split(i, factor=8)[1])
    elif schedule == "parallel":
        s[B].parallel(s[B].split(i, factor=8)[0])
    elif schedule == "gpu":
        bx, tx = s[B].split(i, factor=16)
        s[B].bind(bx, tdsl.thread_axis("blockIdx.x"))
        s[B].bind(tx, tdsl.thread_axis("threadIdx.x"))
    return s, [A, I, B]


def overread():
    """B[i] = A[i] + 1 over independent symbolic sizes: no range proves A[i] inside (the
    call's region check does, before the kernel runs)."""
    n, m = tdsl.size_var("n"), tdsl.size_var("m")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((m,), lambda i: A[i] + 1.0, name="B")
    return tdsl.create_schedule(B), [A, B]


def gather_data(bad_at=3, bad=100, n=N):
    a = np.arange(n, dtype="float32") + 1
    idx = np.arange(n, dtype="int32")[::-1].copy()
    idx[bad_at] = bad
    want = a[np.clip(idx, 0, n - 1)] * 2
    want[bad_at] = 0          # the skipped load reads as 0
    return a, idx, want


def _expect_error(mod, kernel, *args, index=100, extent=N, buffer="A", access="load"):
    with pytest.raises(tdsl.BoundsError) as ei:
        mod(*args)
    msg = str(ei.value)
    assert kernel in msg and f"'{buffer}'" in msg and access in msg, msg
    assert f"index {index}" in msg and f"extent {extent}" in msg, msg
    assert isinstance(ei.value, IndexError)


@pytest.mark.parametrize("target,schedule,kernel", [
    ("llvm", "plain", "main"), ("llvm", "vector", "main"), ("llvm", "parallel", "main"),
    ("c", "plain", "main"), ("c", "vector", "main"), ("c", "gpu", "main_kernel"),
    ("opencl", "gpu", "main_kernel")])
def test_gather_out_of_range_raises_and_the_rest_is_right(target, schedule, kernel):
    if target == "opencl":
        _opencl_or_skip()
    s, args = gather(schedule)
    mod = tdsl.build(s, args, target=target, bounds_check=True)
    a, idx, want = gather_data()
    b = np.full(N, -1, "float32")
    _expect_error(mod, kernel, a, idx, b)
    np.testing.assert_array_equal(b, want)
    # in range: no error, and the checks change no result
    idx[3] = 5
    mod(a, idx, b)
    np.testing.assert_array_equal(b, a[idx] * 2)


def test_negative_index_and_a_prepared_call_runs_again():
    s, args = gather()
    mod = tdsl.build(s, args, bounds_check=True)
    a, idx, _ = gather_data(bad_at=7, bad=-5)
    b = np.zeros(N, "float32")
    run = mod.prepared(a, idx, b)
    for _ in range(2):       # the record is cleared after it is reported
        with pytest.raises(tdsl.BoundsError, match="index -5 is outside its extent 64"):
            run()
    idx[7] = 0
    run()


def _sources(s, args, bounds_check, targets):
    kw = {} if bounds_check == "absent" else {"bounds_check": bounds_check}
    return {t: tdsl.build(s, args, target=t, **kw).get_source() for t in targets}


@pytest.mark.parametrize("target,schedule,kernel", [
    ("llvm", "plain", "main"), ("llvm", "vector", "main"), ("llvm", "parallel", "main"),
    ("c", "plain", "main"), ("c", "gpu", "main_kernel"), ("opencl", "gpu", "main_kernel")])
def test_indices_read_from_memory_are_checked_in_every_build(target, schedule, kernel):
    if target == "opencl":
        _opencl_or_skip()
    s, args = gather(schedule)
    mod = tdsl.build(s, args, target=target, bounds_check=False)
    assert "__tdsl_oob" in mod.get_source()
    a, idx, want = gather_data(bad=N)
    b = np.full(N, -1, "float32")
    _expect_error(mod, kernel, a, idx, b, index=N)
    np.testing.assert_array_equal(b, want)


def test_flag_checks_what_the_loop_ranges_do_not_prove():
    s, args = overread()
    for t in ("c", "llvm"):
        today = _sources(s, args, "absent", (t,))[t]
        assert _sources(s, args, False, (t,))[t] == today and "__tdsl_oob" not in today
        assert "__tdsl_oob" in _sources(s, args, True, (t,))[t]
    mod = tdsl.build(s, args, bounds_check=True)
    a, b = np.arange(16, dtype="float32"), np.zeros(16, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_scatter_store_out_of_range_is_skipped():
    """B[I[i]] = A[i], written as loop IR (a tensor expression cannot scatter)."""
    A = S.Buffer("A", (E.const(N),), "float32")
    I = S.Buffer("I", (E.const(N),), "int32")
    B = S.Buffer("B", (E.const(N),), "float32")
    i = E.Var("i", "int32")
    body = S.For(i, E.const(0), E.const(N), S.ForKind.SERIAL,
                 S.BufferStore(B, E.BufferLoad(A, (i,)), (E.BufferLoad(I, (i,)),)))
    func = S.PrimFunc("scatter", [A, I, B], body, {"num_user_args": 3})
    a = np.arange(N, dtype="float32")
    idx = np.arange(N, dtype="int32")
    idx[10] = N
    for target in ("llvm", "c"):
        mod = tdsl.build(func, target=target, bounds_check=True)
        b = np.full(N, -1, "float32")
        _expect_error(mod, "scatter", a, idx, b, index=N, buffer="B", access="store")
        want = a.copy()
        want[10] = -1
        np.testing.assert_array_equal(b, want)


def test_in_bounds_vector_loop_keeps_its_vector_code():
    """An affine vector loop runs unchanged when its first and last lanes are inside."""
    A = tdsl.placeholder((N,), name="A")
    B = tdsl.compute((N,), lambda i: A[i] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    s[B].vectorize(s[B].split(B.op.axis[0], factor=8)[1])
    mod = tdsl.build(s, [A, B], bounds_check=True)
    a = np.arange(N, dtype="float32")
    b = np.zeros(N, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a + 1)
    assert "<8 x float>" in mod.get_source()


def test_vector_loop_along_a_scattered_row_keeps_its_vector_code():
    """out[I[r], x] += V[r, x] vectorized along x: the row read from memory is the same for
    every lane, so the loop is versioned on its first and last lane (read before the loop)
    and stays a vector loop; a row outside still raises, and nothing is written there."""
    rows, W, n = 10, 32, 12
    I = tdsl.placeholder((n,), name="I", dtype="int64")
    V = tdsl.placeholder((n, W), name="V")
    out = tdsl.compute((rows, W), lambda i, x: tdsl.const(0.0), name="out")
    r = tdsl.reduce_axis((0, n), "r")
    out = tdsl.update(out, lambda x: (I[r], x), lambda old, x: old + V[r, x], axis=r)
    s = tdsl.create_schedule(out)
    u = s[out].update(0)
    (x,), (rr,) = u.op.axis, u.op.reduce_axis
    xo, xi = u.split(x, factor=8)
    u.reorder(rr, xo, xi)
    u.vectorize(xi)
    mod = tdsl.build(s, [I, V, out])
    assert "<8 x float>" in mod.get_source()
    rng = np.random.default_rng(0)
    idx = rng.integers(0, rows, n).astype("int64")
    v = rng.standard_normal((n, W)).astype("float32")
    got = np.zeros((rows, W), "float32")
    mod(idx, v, got)
    want = np.zeros((rows, W), "float32")
    np.add.at(want, idx, v)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    idx[4] = rows
    with pytest.raises(tdsl.BoundsError, match="'out'"):
        mod(idx, v, got)


def test_environment_turns_it_on(monkeypatch):
    s, args = overread()
    monkeypatch.setenv("TDSL_BOUNDS_CHECK", "1")
    assert "__tdsl_oob" in tdsl.build(s, args, target="c").get_source()
    # an explicit False wins over the environment
    assert "__tdsl_oob" not in tdsl.build(s, args, target="c", bounds_check=False).get_source()
    monkeypatch.setenv("TDSL_BOUNDS_CHECK", "maybe")
    with pytest.raises(tdsl.TdslError, match="TDSL_BOUNDS_CHECK"):
        tdsl.build(s, args)


@pytest.mark.parametrize("bad", ["yes", 1, 0.0])
def test_bad_bounds_check_values(bad):
    s, args = gather()
    with pytest.raises(tdsl.TdslError, match="bounds_check"):
        tdsl.build(s, args, bounds_check=bad)


def test_checked_and_unchecked_builds_share_no_cache_entry():
    s, args = overread()
    assert "__tdsl_oob" not in tdsl.build(s, args).get_source()     # cached unchecked
    assert "__tdsl_oob" in tdsl.build(s, args, bounds_check=True).get_source()


def test_exported_library_keeps_its_checks(tmp_path):
    s, args = gather()
    path = tdsl.build(s, args, bounds_check=True).export_library(tmp_path / "g.so")
    a, idx, _ = gather_data()
    with pytest.raises(tdsl.BoundsError, match="'A'"):
        tdsl.load_module(path)(a, idx, np.zeros(N, "float32"))


def test_cuda_source_has_the_checks_and_compiles():
    s, args = gather("gpu")
    mod = tdsl.build(s, args, target="cuda", bounds_check=True)
    src = mod.get_source()
    assert "__tdsl_oob" in src and "long long* __restrict__ __tdsl_oob" in src
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    assert ".entry" in mod.get_source("ptx")


@pytest.mark.parametrize("dtype,offset,checked", [("uint8", 0, False), ("int8", 128, False),
                                                  ("int8", 129, True), ("int16", 0, True)])
def test_narrow_indices_read_from_memory_are_bounded_by_their_type(dtype, offset, checked):
    """A table lookup by a uint8 (a quantized network's lookup table) cannot leave a
    256-entry table and keeps its unchecked code; an offset or a wider type that can leave
    it is checked."""
    X = tdsl.placeholder((N,), name="X", dtype=dtype)
    T = tdsl.placeholder((256,), name="T")
    Y = tdsl.compute((N,), lambda i: T[tdsl.cast(X[i], "int32") + offset], name="Y")
    s = tdsl.create_schedule(Y)
    s[Y].vectorize(s[Y].split(Y.op.axis[0], factor=16)[1])
    assert ("__tdsl_oob" in tdsl.build(s, [X, T, Y], target="c").get_source()) == checked
    info = np.iinfo(dtype)
    x = np.arange(N).astype(dtype) + np.asarray(max(info.min, -offset), dtype)
    t = np.arange(256, dtype="float32")
    y = np.zeros(N, "float32")
    tdsl.build(s, [X, T, Y])(x, t, y)
    np.testing.assert_array_equal(y, t[x.astype(int) + offset])


@pytest.mark.parametrize("hi,checked", [(255, False), (256, True)])
def test_clamped_indices_read_from_memory_are_proven_inside(hi, checked):
    """An int32 index read from memory is proven inside only through a clamp: a table of
    positions built by the compiler (Resize's) clamped to the axis keeps its unchecked
    vector code; a clamp one past the end does not prove it."""
    X = tdsl.placeholder((N,), name="X", dtype="int32")
    T = tdsl.placeholder((256,), name="T")
    Y = tdsl.compute((N,), lambda i: T[tdsl.min(tdsl.max(X[i], 0), hi)], name="Y")
    s = tdsl.create_schedule(Y)
    assert ("__tdsl_oob" in tdsl.build(s, [X, T, Y], target="c").get_source()) == checked
    x = np.arange(N, dtype="int32") * 3 - 20
    t = np.arange(256, dtype="float32")
    y = np.zeros(N, "float32")
    tdsl.build(s, [X, T, Y])(x, t, y)
    np.testing.assert_array_equal(y, t[np.clip(x, 0, 255)])


@pytest.mark.parametrize("narrow", [True, False])
def test_indices_computed_from_floats_read_from_memory(narrow):
    """A quantized lookup's index, uint8(x * s) of a float read from memory, is within the
    table whatever the float; int32(x * s) may be anything and is checked (the build must
    not fail on float math it cannot bound)."""
    X = tdsl.placeholder((N,), name="X")
    T = tdsl.placeholder((256,), name="T")
    if narrow:
        Y = tdsl.compute((N,), lambda i: T[tdsl.cast(tdsl.cast(X[i] * 3.0, "uint8"), "int32")], name="Y")
    else:
        Y = tdsl.compute((N,), lambda i: T[tdsl.cast(X[i] * 3.0, "int32")], name="Y")
    s = tdsl.create_schedule(Y)
    assert ("__tdsl_oob" in tdsl.build(s, [X, T, Y], target="c").get_source()) != narrow
    x = np.arange(N, dtype="float32")
    t = np.arange(256, dtype="float32") * 2
    y = np.zeros(N, "float32")
    tdsl.build(s, [X, T, Y])(x, t, y)
    np.testing.assert_array_equal(y, t[(x * 3).astype(int)])
    if not narrow:
        x[5] = 100.0
        with pytest.raises(tdsl.BoundsError, match="index 300 is outside its extent 256"):
            tdsl.build(s, [X, T, Y])(x, t, y)


@pytest.mark.parametrize("hi,checked", [(255, False), (256, True)])
def test_clamped_indices_computed_from_floats_are_proven_inside(hi, checked):
    """int32(x * s) of a float read from memory may be any int32, but clamped to the table
    it is inside (a bilateral grid's intensity bin): the lookup keeps its unchecked
    vector code; a clamp one past the end does not prove it."""
    X = tdsl.placeholder((N,), name="X")
    T = tdsl.placeholder((256,), name="T")
    Y = tdsl.compute((N,), lambda i: T[tdsl.min(tdsl.max(tdsl.cast(X[i] * 3.0, "int32"), 0), hi)],
                     name="Y")
    s = tdsl.create_schedule(Y)
    s[Y].vectorize(s[Y].split(Y.op.axis[0], factor=16)[1])
    assert ("__tdsl_oob" in tdsl.build(s, [X, T, Y], target="c").get_source()) == checked
    x = np.arange(N, dtype="float32") * 7 - 30
    t = np.arange(256, dtype="float32") * 2
    y = np.zeros(N, "float32")
    if checked:
        with pytest.raises(tdsl.BoundsError, match="index 256 is outside its extent 256"):
            tdsl.build(s, [X, T, Y])(x, t, y)
        return
    tdsl.build(s, [X, T, Y])(x, t, y)
    np.testing.assert_array_equal(y, t[np.clip((x * 3).astype(int), 0, 255)])


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_and_guards_its_right_side(target):
    """`a and b` evaluates b only where a holds (`or`: where a fails), so a load in b that
    a keeps inside is neither a lowering error nor a reported failure."""
    A = tdsl.placeholder((8,), name="A")
    r = tdsl.reduce_axis((0, 3), "r")
    B = tdsl.compute((8,), lambda i: tdsl.sum(A[i] * 0.0 + 1.0, axis=r, where=tdsl.all(
        i + r < 8, A[i + r] > 0.0)), name="B")
    C = tdsl.compute((8,), lambda i: tdsl.sum(A[i] * 0.0 + 1.0, axis=r, where=tdsl.any(
        i + r >= 8, A[i + r] > 0.0)), name="C")
    f = tdsl.build(tdsl.create_schedule([B.op, C.op]), [A, B, C], target=target,
                   bounds_check=True)
    a = np.random.RandomState(1).randn(8).astype("float32")
    b, c = np.zeros(8, "float32"), np.zeros(8, "float32")
    f(a, b, c)
    want = [sum(a[i + k] > 0 for k in range(3) if i + k < 8) for i in range(8)]
    np.testing.assert_array_equal(b, want)
    np.testing.assert_array_equal(c, [w + sum(i + k >= 8 for k in range(3))
                                      for i, w in enumerate(want)])


def embedding(vocab=50, width=64, unroll=True, tokens=None):
    """out[t, x] = Emb[I[t], x] + Pos[t, x], vectorized by 8 along x and unrolled: the
    graph layer's embedding gather + add, with `tokens` tokens (None: a symbolic count)."""
    T = tdsl.size_var("T") if tokens is None else tokens
    I = tdsl.placeholder((T,), name="I", dtype="int64")
    Emb = tdsl.placeholder((vocab, width), name="Emb")
    Pos = tdsl.placeholder((T, width), name="Pos")
    out = tdsl.compute((T, width), lambda t, x: Emb[I[t], x] + Pos[t, x], name="out")
    s = tdsl.create_schedule(out)
    xo, xi = s[out].split(out.op.axis[1], factor=8)
    s[out].vectorize(xi)
    if unroll:
        s[out].unroll(xo)
    return s, [I, Emb, Pos, out]


def _vector_guards(func):
    """The conditions of the IfThenElses that version a vector loop, and the variables the
    LetStmts around them bind."""
    from tdsl.ir.visitor import walk
    conds, lets = [], {}

    def f(n):
        if isinstance(n, S.IfThenElse) and isinstance(n.then_case, S.For) \
                and n.then_case.kind is S.ForKind.VECTORIZED:
            conds.append(n.cond)
        elif isinstance(n, S.LetStmt):
            lets[n.var] = n.value
    walk(func.body, f)
    return conds, lets


def test_vector_gather_condition_has_each_term_once_and_reads_the_row_once():
    """Every unrolled vector of an embedding gather is versioned on a condition whose
    terms are all distinct, and the row I[t] is read once per vector, before it, not once
    per access and lane."""
    from tdsl.ir.visitor import conjuncts, expr_key, walk
    from tdsl.lower import build_passes, lower_for_target
    s, args = embedding(tokens=12)
    func = build_passes(lower_for_target(tdsl.lower(s, args), "llvm"))
    conds, lets = _vector_guards(func)
    assert conds
    for c in conds:
        keys = [expr_key(t) for t in conjuncts(c)]
        assert len(keys) == len(set(keys)), c
        loads = []
        walk(c, lambda n: loads.append(n) if isinstance(n, E.BufferLoad) else None)
        assert not any(ld.buffer.name == "I" for ld in loads), c
        used = [v for v in lets if v in tdsl.ir.visitor.free_vars(c)]
        assert len(used) == 1, c     # the one row, read in a LetStmt before the condition


@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("unroll", [True, False])
def test_vector_gather_rows_in_and_out_of_range(target, unroll):
    """The versioned vector gather matches numpy for rows inside, and a row outside the
    table (past the end or negative) raises naming the table, the other rows right and
    the bad row's output 0 (its loads skipped), as before the condition was shared."""
    vocab, width, T = 50, 64, 9
    s, args = embedding(vocab, width, unroll)
    mod = tdsl.build(s, args, target=target)
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((vocab, width)).astype("float32")
    pos = rng.standard_normal((T, width)).astype("float32")
    idx = rng.integers(0, vocab, T).astype("int64")
    out = np.zeros((T, width), "float32")
    mod(idx, emb, pos, out)
    np.testing.assert_array_equal(out, emb[idx] + pos)
    for bad in (vocab, -1, 2 ** 40):
        bidx = idx.copy()
        bidx[4] = bad
        out = np.full((T, width), -7, "float32")
        with pytest.raises(tdsl.BoundsError, match=f"'Emb'.*index {bad * width}.*extent {vocab * width}"):
            mod(bidx, emb, pos, out)
        want = emb[np.clip(bidx, 0, vocab - 1)] + pos
        want[4] = pos[4]
        np.testing.assert_array_equal(out, want)


def test_vector_gather_condition_holds_only_what_the_checked_copy_checks():
    """With a run-time token count nothing proves the lanes of Pos and out inside, but
    a build checks only indices read from memory, so the checked copy does not check
    them either: the condition that versions each vector holds the table's terms (its
    row read from I) alone."""
    from tdsl.ir.visitor import conjuncts, free_vars, walk
    from tdsl.lower import build_passes, lower_for_target
    s, args = embedding()
    func = build_passes(lower_for_target(tdsl.lower(s, args), "llvm"))
    conds, lets = _vector_guards(func)
    assert conds
    for c in conds:
        for t in conjuncts(c):
            loads = []
            walk(t, lambda n: loads.append(n) if isinstance(n, E.BufferLoad) else None)
            assert loads or free_vars(t) & set(lets), t


def test_vector_gather_reads_the_row_once_at_a_run_time_token_count():
    """Against a run-time extent no proof puts I[t] inside I, but every vector reads it
    whatever the data, and a build does not check a load-free index: the row is read
    once, in a LetStmt before the condition, as at a fixed count."""
    from tdsl.ir.visitor import free_vars, walk
    from tdsl.lower import build_passes, lower_for_target
    s, args = embedding()
    func = build_passes(lower_for_target(tdsl.lower(s, args), "llvm"))
    conds, lets = _vector_guards(func)
    assert conds
    for c in conds:
        loads = []
        walk(c, lambda n: loads.append(n) if isinstance(n, E.BufferLoad) else None)
        assert not any(ld.buffer.name == "I" for ld in loads), c
        assert len([v for v in lets if v in free_vars(c)]) == 1, c


@pytest.mark.parametrize("tokens", [None, 12])
def test_vector_gather_checked_copy_indexes_by_the_row_read_once(tokens):
    """The checked copy of each versioned vector (a serial loop LLVM keeps as written)
    indexes the table by the row the LetStmt read, never reading I again: spelt out in
    each check, record and load, the row was most of a gather's IR. The vector copy is
    left as it was. Rows out of range are still caught: see the test above."""
    from tdsl.ir.visitor import free_vars, walk
    from tdsl.lower import build_passes, lower_for_target
    s, args = embedding(tokens=tokens)
    func = build_passes(lower_for_target(tdsl.lower(s, args), "llvm"))
    copies = []
    walk(func.body, lambda n: copies.append(n) if isinstance(n, S.IfThenElse)
         and isinstance(n.then_case, S.For) and n.then_case.kind is S.ForKind.VECTORIZED else None)
    assert copies
    for v in copies:
        slow = v.else_case
        assert isinstance(slow, S.For) and slow.kind is S.ForKind.SERIAL
        assert ("tail", True) in slow.pragmas
        rows, emb = [], []

        def f(n):
            if isinstance(n, E.BufferLoad):
                (rows if n.buffer.name == "I" else emb if n.buffer.name == "Emb" else []).append(n)
        walk(slow, f)
        assert not rows and emb
        assert all(free_vars(ld.indices[0]) & free_vars(v.cond) for ld in emb)


def guarded_embedding(vocab=50, width=64):
    """out[t, x] = Emb[I[t], x] for t < K, 0 past it: I holds K rows, fewer than the T of
    out, so I[t] may be read only under t < K."""
    T, K = tdsl.size_var("T"), tdsl.size_var("K")
    I = tdsl.placeholder((K,), name="I", dtype="int64")
    Emb = tdsl.placeholder((vocab, width), name="Emb")
    out = tdsl.compute((T, width), lambda t, x: tdsl.if_then_else(
        t < K, Emb[I[t], x], tdsl.const(0.0, "float32")), name="out")
    s = tdsl.create_schedule(out)
    s[out].vectorize(s[out].split(out.op.axis[1], factor=8)[1])
    return s, [I, Emb, out]


def test_vector_gather_row_under_a_condition_is_not_read_before_it():
    """A row the loop reads only under a condition (t < K) stays where it is read: read
    before the loop it would be read past the end of I. The result matches numpy."""
    from tdsl.ir.visitor import walk
    from tdsl.lower import build_passes, lower_for_target
    s, args = guarded_embedding()
    func = build_passes(lower_for_target(tdsl.lower(s, args), "llvm"))
    _, lets = _vector_guards(func)
    for value in lets.values():
        loads = []
        walk(value, lambda n: loads.append(n) if isinstance(n, E.BufferLoad) else None)
        assert not any(ld.buffer.name == "I" for ld in loads), value
    mod = tdsl.build(s, args, target="llvm")
    rng = np.random.default_rng(2)
    emb = rng.standard_normal((50, 64)).astype("float32")
    for T, K in ((7, 3), (1, 1), (40, 17)):
        idx = rng.integers(0, 50, K).astype("int64")
        out = np.full((T, 64), -7, "float32")
        mod(idx, emb, out)
        want = np.zeros((T, 64), "float32")
        want[:K] = emb[idx]
        np.testing.assert_array_equal(out, want)
