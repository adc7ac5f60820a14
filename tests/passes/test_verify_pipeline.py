"""The verifier after every pass of PASSES on a set of schedules (CPU, GPU, scan, extern,
double buffer, virtual threads, cross-thread reduction, tensor cores), through lower() and
build()'s passes, with every pass of each phase seen."""
import pytest

import tdsl
from tdsl.examples import gpu as G
from tdsl.examples import mma_gemm
from tdsl.passes import verify as V

from pass_ir import LOWER, gpu_reverse_rows


@pytest.fixture
def verified(monkeypatch):
    """The names of the passes after which lowering verified the IR, in order."""
    seen = []

    def spy(func, after=None):
        seen.append(after)
        return V.verify(func, after)
    monkeypatch.setattr(LOWER, "verify", spy)
    monkeypatch.setenv("TDSL_VERIFY", "1")
    return seen


def _names(*phases):
    return [p.name for p in LOWER.PASSES if p.phase in phases]


def _cpu():
    A = tdsl.placeholder((37, 19), name="A")
    B = tdsl.compute((37, 19), lambda i, j: A[i, j] * 2.0, name="B")
    C = tdsl.compute((37, 19), lambda i, j: B[i, j] + A[i, 18 - j], name="C")
    s = tdsl.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(io, jo, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    s[B].compute_at(s[C], jo)
    return s, [A, C]


def _vthread():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((8,), lambda i: A[i] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    vo, _ = s[B].split(B.op.axis[0], nparts=2)
    s[B].bind(vo, tdsl.thread_axis("vthread", name="vx"))
    return s, [A, B]


def _double_buffer():
    A = tdsl.placeholder((16, 20), name="A")
    B = tdsl.placeholder((20, 8), name="B")
    k = tdsl.reduce_axis((0, 20), name="k")
    C = tdsl.compute((16, 8), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    s[C].bind(i, tdsl.thread_axis("blockIdx.x"))
    s[C].bind(j, tdsl.thread_axis("threadIdx.x"))
    ko, _ = s[C].split(k, factor=4)
    BS = s.cache_read(B, "shared", [C])
    s[BS].compute_at(s[C], ko)
    s[BS].bind(s[BS].op.axis[1], tdsl.thread_axis("threadIdx.x"))
    s[BS].double_buffer()
    return s, [A, B, C]


def _scan(gpu):
    m, n = tdsl.var("m"), tdsl.var("n")
    X = tdsl.placeholder((m, n), name="X")
    state = tdsl.placeholder((m, n))
    init = tdsl.compute((1, n), lambda _, i: X[0, i])
    update = tdsl.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i])
    res = tdsl.scan(init, update, state, inputs=[X])
    s = tdsl.create_schedule(res.op)
    for st in ((init, update) if gpu else ()):
        xo, xi = s[st].split(st.op.axis[1], factor=32)
        s[st].bind(xo, tdsl.thread_axis("blockIdx.x"))
        s[st].bind(xi, tdsl.thread_axis("threadIdx.x"))
    return s, [X, res]


def _extern():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.extern(A.shape, [A], lambda ins, outs: tdsl.call_packed(
        "test.verify_copy", ins[0], outs[0]), name="B")
    C = tdsl.compute(A.shape, lambda i: B[i] + 1.0, name="C")
    return tdsl.create_schedule(C.op), [A, C]


def _gather():
    A = tdsl.placeholder((16,), name="A")
    idx = tdsl.placeholder((4,), name="idx", dtype="int32")
    B = tdsl.compute((4,), lambda i: A[idx[i]] * 2.0, name="B")
    return tdsl.create_schedule(B), [A, idx, B]


CPU_CASES = {"cpu": _cpu, "vthread": _vthread, "scan": lambda: _scan(False),
             "extern": _extern, "gather": _gather}
GPU_CASES = {"shared": lambda: gpu_reverse_rows("block"),
             "host_buffer": lambda: gpu_reverse_rows("root"),
             "double_buffer": _double_buffer, "scan": lambda: _scan(True),
             "matmul_vthread": lambda: G.matmul_schedule(64, 48, 32),
             "softmax": lambda: G.softmax_schedule(5, 100),
             "sum_rfactor": lambda: G.sum_schedule(6, 100),
             "tensor_cores": lambda: mma_gemm.schedule(32, 16, 16, "float16", warps=(1, 1),
                                                       warp_tiles=(2, 2), k_step=16)}


@pytest.mark.parametrize("case", list(CPU_CASES))
def test_cpu_lowering_and_build_passes_verified(case, verified):
    s, args = CPU_CASES[case]()
    f = tdsl.lower(s, args, target="llvm")
    cpu = [] if LOWER.binds_threads(s) else ["inject_virtual_thread"]
    assert verified == ["schedule_ops"] + _names(LOWER.LOWER, LOWER.TARGET) + cpu
    del verified[:]
    for everything in (False, True):
        LOWER.build_passes(f, bounds_check=everything)
    assert verified == ["bounds_check", "bounds_check"]


@pytest.mark.parametrize("case", list(GPU_CASES))
@pytest.mark.parametrize("target", ["cuda", "c"])
def test_gpu_lowering_and_build_passes_verified(case, target, verified):
    s, args = GPU_CASES[case]()
    f = tdsl.lower(s, args, target=target)
    assert verified == ["schedule_ops"] + _names(LOWER.LOWER, LOWER.TARGET, LOWER.GPU)
    del verified[:]
    LOWER.build_passes(f, bounds_check=True)
    assert verified == ["bounds_check"]


def test_target_passes_at_build_time_verified(verified):
    """A function lowered for no target gets the target's passes (and the GPU's) from
    build(): lower_for_target runs them, verified as well."""
    s, args = gpu_reverse_rows("block")
    f = tdsl.lower(s, args)
    assert verified == ["schedule_ops"] + _names(LOWER.LOWER)
    del verified[:]
    LOWER.lower_for_target(f, "c")
    assert verified == ["lower"] + _names(LOWER.TARGET, LOWER.GPU)
