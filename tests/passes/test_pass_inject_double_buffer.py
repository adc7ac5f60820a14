"""inject_double_buffer alone: a `double_buffer()` stage's fill moves one iteration ahead
into a second buffer, the loop taking two iterations a step; on the GPU one barrier a step
and commits of the copy groups; a function with no such stage is returned as it is."""
import tdsl
from tdsl.ir import stmt as S
from tdsl.passes.double_buffer import inject_double_buffer

from pass_ir import before, nodes


def _matmul(gpu):
    A = tdsl.placeholder((4, 12), name="A")
    B = tdsl.placeholder((12, 4), name="B")
    k = tdsl.reduce_axis((0, 12), name="k")
    C = tdsl.compute((4, 4), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    ko, _ = s[C].split(k, factor=4)
    BB = s.cache_read(B, "shared" if gpu else "global", [C])
    s[BB].compute_at(s[C], ko)
    if gpu:
        i, j = C.op.axis
        s[C].bind(i, tdsl.thread_axis("blockIdx.x"))
        s[C].bind(j, tdsl.thread_axis("threadIdx.x"))
        s[BB].bind(s[BB].op.axis[1], tdsl.thread_axis("threadIdx.x"))
    return s, [A, B, C], BB


def _loop(func, name):
    return [f for f in nodes(func.body, S.For) if f.var.name == name]


def test_fill_runs_one_iteration_ahead_into_a_second_buffer():
    s, args, BB = _matmul(gpu=False)
    s[BB].double_buffer()
    f = before("inject_double_buffer", s, args)
    assert list(f.attrs["double_buffer"].values()) == [2]
    assert _loop(f, "k.outer") and str(_loop(f, "k.outer")[0].extent) == "3"
    out = inject_double_buffer(f)
    text = str(out)
    assert not _loop(out, "k.outer")
    (step,) = _loop(out, "k.outer.db")
    assert str(step.extent) == "2"                     # ceil(3 / 2) steps of two iterations
    assert [a.buffer.name for a in nodes(out.body, S.Allocate)] == ["B.global.db", "B.global"]
    # the prologue fills B.global for iteration 0; each step fills the other buffer for
    # the next iteration, guarded where that iteration does not exist
    assert "B.global[ax0, ax1] = B[0 * 4 + ax0, j + ax1]" in text
    assert "if likely(k.outer.db * 2 + 1 < 3):" in text
    assert "B.global.db[ax0, ax1] = B[(k.outer.db * 2 + 1) * 4 + ax0, j + ax1]" in text
    assert not nodes(out.body, (S.Barrier, S.AsyncCommit))   # the CPU needs neither


def test_gpu_pipeline_has_one_barrier_a_step_and_commits():
    s, args, BB = _matmul(gpu=True)
    s[BB].double_buffer()
    out = inject_double_buffer(before("inject_double_buffer", s, args, target="cuda"))
    (step,) = _loop(out, "k.outer.db")
    assert len(nodes(step, S.Barrier)) == 2            # one per unrolled iteration
    assert all(b.async_wait == 0 for b in nodes(step, S.Barrier))
    assert len(nodes(out.body, S.AsyncCommit)) == 3    # the prologue's and each iteration's


def test_function_without_double_buffered_stages_is_returned_as_is():
    s, args, _ = _matmul(gpu=False)
    f = before("inject_double_buffer", s, args)
    assert not f.attrs.get("double_buffer")
    assert inject_double_buffer(f) is f
