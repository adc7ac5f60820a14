"""inject_virtual_thread alone: a loop bound to "vthread" becomes an unrolled loop pushed
down between barriers: work that does not depend on it runs once, a local buffer written
per virtual thread gets one copy each; a function without virtual threads is returned as
it is."""
import tdsl
from tdsl.ir import stmt as S
from tdsl.passes.virtual_thread import inject_virtual_thread

from pass_ir import before, nodes


def _loops(node):
    return [(f.var.name, f.kind.value) for f in nodes(node, S.For)]


def test_cpu_virtual_thread_becomes_an_unrolled_loop():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((8,), lambda i: A[i] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    vo, _ = s[B].split(B.op.axis[0], nparts=2)
    s[B].bind(vo, tdsl.thread_axis("vthread", name="vx"))
    f = before("inject_virtual_thread", s, [A, B])
    assert _loops(f.body) == [("i.outer", "thread_binding"), ("i.inner", "serial")]
    out = inject_virtual_thread(f)
    assert _loops(out.body) == [("i.outer", "unrolled"), ("i.inner", "serial")]
    assert str(out.body.body) == str(f.body.body)


def _gpu_matmul():
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
    return before("inject_virtual_thread", s, [A, B, C], target="cuda", nth=1)


def test_gpu_virtual_threads_meet_at_barriers_and_copy_local_buffers():
    f = _gpu_matmul()
    assert len(nodes(f.body, S.Barrier)) == 2
    out = inject_virtual_thread(f)
    text = str(out)
    assert "vthread" not in text
    assert len(nodes(out.body, S.Barrier)) == 2        # the barriers are kept, once
    # the shared fill runs once per thread; the accumulator has a copy per virtual thread
    (fill,) = [x for x in nodes(out.body, S.For) if x.var.name == "ax1"]
    assert not [x for x in nodes(fill, S.For) if x.kind is S.ForKind.UNROLLED]
    assert 'C.local = allocate((2), float32, "local")' in text
    assert "C.local[i.inner.outer] = C.local[i.inner.outer] + " in text
    assert sum(1 for x in nodes(out.body, S.For) if x.kind is S.ForKind.UNROLLED) == 3


def test_function_without_virtual_threads_is_returned_as_is():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((8,), lambda i: A[i] * 2.0, name="B")
    f = before("inject_virtual_thread", tdsl.create_schedule(B), [A, B])
    assert inject_virtual_thread(f) is f
