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


def p_set_store_predicate(s, out):
    s[out].set_store_predicate(out.op.axis[1].var % 3 != 1)


def p_double_buffer(s, out):
    ko, ki = s[out].split(out.op.reduce_axis[0], factor=5)
    B = out.op.input_tensors()[1]
    BB = s.cache_read(B, "global", [out])
    s[BB].compute_at(s[out], ko)
    s[BB].double_buffer()


def p_vthread(s, out):
    vo, vi = s[out].split(out.op.axis[0], nparts=2)
    s[out].bind(vo, tdsl.thread_axis("vthread", name="vx"))


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
    "set_store_predicate": (elementwise, p_set_store_predicate),
    "double_buffer": (matmul, p_double_buffer),
    "vthread": (matmul, p_vthread),
}

# the predicate leaves some elements alone: the reference says which stay NaN
MASKED = {"set_store_predicate": lambda out: out.__setitem__((slice(None), slice(1, None, 3)),
                                                             np.nan)}

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
    MASKED.get(case, lambda out: None)(expected)
    out = np.full(expected.shape, np.nan, dtype="float32")
    f(*inputs, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def _argmax_rows():
    """A reduction over (index, value) tuples: two outputs of one stage."""
    argmax = tdsl.comm_reducer(
        lambda x, y: (tdsl.select(x[1] >= y[1], x[0], y[0]), tdsl.select(x[1] >= y[1], x[1], y[1])),
        lambda t0, t1: (tdsl.const(-1, t0), tdsl.min_value(t1)), name="argmax")
    A = tdsl.placeholder((16, 20), name="A")
    k = tdsl.reduce_axis((0, 20), name="k")
    I, V = tdsl.compute((16,), lambda i: argmax((k.astype("int32"), A[i, k]), axis=k), name="T")
    return A, I, V


def g_tuple_reduce():
    A, I, V = _argmax_rows()
    return tdsl.create_schedule(I.op), [A, I, V], None


def g_tuple_rfactor():
    A, I, V = _argmax_rows()
    s = tdsl.create_schedule(I.op)
    ko, ki = s[I].split(s[I].op.reduce_axis[0], factor=4)
    IF, _ = s.rfactor(I, ki)
    s[IF].compute_at(s[I], s[I].op.axis[0])
    return s, [A, I, V], None


def g_multi_output():
    A = tdsl.placeholder((16, 20), name="A")
    S, P = tdsl.compute((16, 20), lambda i, j: (A[i, j] + 1.0, A[i, j] * 2.0), name="SP")
    C = tdsl.compute((16, 20), lambda i, j: S[i, j] - P[i, j], name="C")
    s = tdsl.create_schedule(C)
    SC, PC = s.cache_write([S, P], "local")
    s[S].compute_at(s[C], C.op.axis[0])
    s[SC].compute_at(s[C], C.op.axis[0])
    return s, [A, C], None


def g_gpu_double_buffer():
    """A shared cache double-buffered across the reduction loop: one barrier per step."""
    A = tdsl.placeholder((16, 20), name="A")
    B = tdsl.placeholder((20, 8), name="B")
    k = tdsl.reduce_axis((0, 20), name="k")
    C = tdsl.compute((16, 8), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    s[C].bind(i, tdsl.thread_axis("blockIdx.x"))
    s[C].bind(j, tdsl.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(k, factor=4)
    BS = s.cache_read(B, "shared", [C])
    s[BS].compute_at(s[C], ko)
    s[BS].bind(s[BS].op.axis[1], tdsl.thread_axis("threadIdx.x"))
    s[BS].double_buffer()
    return s, [A, B, C], "cuda"


def g_gpu_vthread():
    """Two virtual threads per thread: the shared fill once, the work for each."""
    A = tdsl.placeholder((16, 20), name="A")
    B = tdsl.placeholder((20, 8), name="B")
    k = tdsl.reduce_axis((0, 20), name="k")
    C = tdsl.compute((16, 8), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    bi, vi = s[C].split(i, nparts=8)
    vt, ti = s[C].split(vi, nparts=2)
    s[C].reorder(bi, vt, j, ti)
    s[C].bind(bi, tdsl.thread_axis("blockIdx.x"))
    s[C].bind(vt, tdsl.thread_axis((0, 2), "vthread", name="vy"))
    s[C].bind(j, tdsl.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], j)
    BS = s.cache_read(B, "shared", [CL])
    s[BS].compute_at(s[CL], s[CL].op.reduce_axis[0])
    s[BS].bind(s[BS].op.axis[1], tdsl.thread_axis("threadIdx.x"))
    return s, [A, B, C], "cuda"


EXTRA_GOLDEN = {"tuple_reduce": g_tuple_reduce, "tuple_rfactor": g_tuple_rfactor,
                "multi_output": g_multi_output, "gpu_double_buffer": g_gpu_double_buffer,
                "gpu_vthread": g_gpu_vthread}


def _golden(case, text, request):
    path = os.path.join(GOLDEN, case + ".txt")
    if request.config.getoption("--update-golden") or not os.path.exists(path):
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
        if not request.config.getoption("--update-golden"):
            pytest.fail(f"golden file {path} was missing; written now, check it in")
    with open(path) as fh:
        assert text == fh.read(), f"IR of {case} changed; if intended, run pytest --update-golden"


@pytest.mark.parametrize("case", list(CASES))
def test_golden_ir(case, request):
    s, args, _ = _build(case, (16, 20))
    _golden(case, str(tdsl.lower(s, args, name=case)) + "\n", request)


@pytest.mark.parametrize("case", list(EXTRA_GOLDEN))
def test_golden_ir_tuples_and_gpu(case, request):
    s, args, target = EXTRA_GOLDEN[case]()
    _golden(case, str(tdsl.lower(s, args, name=case, target=target)) + "\n", request)
