"""Each schedule primitive: numerics against numpy on square, ragged and symbolic shapes,
and golden loop-IR text (regenerate with `pytest --update-golden`)."""
import os

import numpy as np
import pytest

import tdsl

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


# ------------------------------------------------------------------ kernels

def elementwise(M, N):
    A = tdsl.placeholder((M, N), name="A")
    B = tdsl.compute((M, N), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return [A], B, lambda a: a * 2 + 1


def matmul(M, N, K=12):
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B], C, lambda a, b: a @ b


def two_stage(M, N):
    """P is a producer read at two offsets, so its region inside a consumer loop is 2 wide."""
    A = tdsl.placeholder((M, N + 1), name="A")
    P = tdsl.compute((M, N + 1), lambda i, j: A[i, j] * 3.0, name="P")
    C = tdsl.compute((M, N), lambda i, j: P[i, j] + P[i, j + 1], name="C")
    return [A], C, lambda a: a[:, :-1] * 3 + a[:, 1:] * 3


def row_sum(M, N):
    A = tdsl.placeholder((M, N), name="A")
    k = tdsl.reduce_axis((0, N), name="k")
    S = tdsl.compute((M,), lambda i: tdsl.sum(A[i, k], axis=k), name="S")
    return [A], S, lambda a: a.sum(axis=1)


def _producer(out):
    return out.op.input_tensors()[0]


# ------------------------------------------------------------------ one schedule per primitive

def p_split(s, out):
    s[out].split(out.op.axis[1], factor=4)


def p_split_nparts(s, out):
    s[out].split(out.op.axis[0], nparts=3)


def p_fuse(s, out):
    s[out].fuse(*out.op.axis)


def p_reorder(s, out):
    s[out].reorder(out.op.axis[1], out.op.axis[0])


def p_tile(s, out):
    s[out].tile(out.op.axis[0], out.op.axis[1], 4, 8)


def p_vectorize(s, out):
    jo, ji = s[out].split(out.op.axis[1], factor=8)
    s[out].vectorize(ji)


def p_unroll(s, out):
    io, ii = s[out].split(out.op.axis[0], factor=2)
    s[out].unroll(ii)


def p_parallel(s, out):
    s[out].parallel(out.op.axis[0])


def p_compute_at(s, out):
    s[_producer(out)].compute_at(s[out], out.op.axis[0])


def p_compute_inline(s, out):
    s[_producer(out)].compute_inline()


def p_compute_root(s, out):
    p = _producer(out)
    s[p].compute_at(s[out], out.op.axis[0])
    s[p].compute_root()


def p_cache_read_local(s, out):
    p = _producer(out)
    c = s.cache_read(p, "local", [out])
    s[c].compute_at(s[out], out.op.axis[0])


def p_cache_read_global(s, out):
    p = _producer(out)
    s.cache_read(p, "global", [out])


def p_cache_write_local(s, out):
    c = s.cache_write(out, "local")
    io, ii = s[out].split(out.op.axis[0], factor=4)
    s[c].compute_at(s[out], io)


def p_cache_write_global(s, out):
    s.cache_write(out, "global")


def p_rfactor(s, out):
    ko, ki = s[out].split(out.op.reduce_axis[0], factor=4)
    rf = s.rfactor(out, ki)
    s[rf].compute_at(s[out], out.op.axis[0])


def p_pragma(s, out):
    s[out].pragma(out.op.axis[0], "auto_unroll_max_step", 16)


def p_storage_align(s, out):
    p = _producer(out)
    s[p].storage_align(p.op.axis[0], 16, 3)


CASES = {
    "split": (elementwise, p_split),
    "split_nparts": (elementwise, p_split_nparts),
    "fuse": (elementwise, p_fuse),
    "reorder": (matmul, p_reorder),
    "tile": (matmul, p_tile),
    "vectorize": (elementwise, p_vectorize),
    "unroll": (matmul, p_unroll),
    "parallel": (matmul, p_parallel),
    "compute_at": (two_stage, p_compute_at),
    "compute_inline": (two_stage, p_compute_inline),
    "compute_root": (two_stage, p_compute_root),
    "cache_read_local": (two_stage, p_cache_read_local),
    "cache_read_global": (two_stage, p_cache_read_global),
    "cache_write_local": (matmul, p_cache_write_local),
    "cache_write_global": (matmul, p_cache_write_global),
    "rfactor": (row_sum, p_rfactor),
    "pragma": (elementwise, p_pragma),
    "storage_align": (two_stage, p_storage_align),
}

SHAPES = {"square": (16, 16), "ragged": (13, 21), "symbolic": None}


def _build(case, shape):
    kernel, prim = CASES[case]
    if shape is None:
        M, N = tdsl.var("m"), tdsl.var("n")
    else:
        M, N = shape
    ins, out, ref = kernel(M, N)
    s = tdsl.create_schedule(out)
    prim(s, out)
    return s, ins + [out], ref


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("case", list(CASES))
def test_numerics(case, shape):
    s, args, ref = _build(case, SHAPES[shape])
    f = tdsl.build(s, args)
    M, N = SHAPES[shape] or (11, 19)
    rng = np.random.default_rng(1)
    inputs = []
    for t in args[:-1]:
        dims = [M if str(d) == "m" else N if str(d) == "n" else None for d in t.shape]
        conc = []
        for d, sym in zip(t.shape, dims):
            if sym is not None:
                conc.append(sym)
            elif hasattr(d, "value"):
                conc.append(d.value)
            else:  # an expression of sizes, e.g. n + 1
                conc.append(N + 1)
        inputs.append(rng.standard_normal(conc).astype("float32"))
    expected = ref(*inputs)
    out = np.full(expected.shape, np.nan, dtype="float32")
    f(*inputs, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_golden_ir(case, request):
    s, args, _ = _build(case, (16, 20))
    text = str(tdsl.lower(s, args, name=case)) + "\n"
    path = os.path.join(GOLDEN, case + ".txt")
    if request.config.getoption("--update-golden") or not os.path.exists(path):
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
        if not request.config.getoption("--update-golden"):
            pytest.fail(f"golden file {path} was missing; written now, check it in")
    with open(path) as fh:
        assert text == fh.read(), f"IR of {case} changed; if intended, run pytest --update-golden"
