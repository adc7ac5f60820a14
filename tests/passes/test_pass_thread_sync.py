"""thread_sync alone: a barrier where threads read what other threads of the block wrote
to shared memory (and at the end of a loop that reads and writes it); none where each
thread reads only what it wrote, and a barrier under a thread-dependent condition is an
error."""
import pytest

import tdsl
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.gpu import gpu_storage_scope
from tdsl.passes.thread_sync import thread_sync

from pass_ir import before, func, gpu_reverse_rows, loop, nodes


def _lowered(at):
    s, args = gpu_reverse_rows(at)
    return gpu_storage_scope(before("gpu_storage_scope", s, args, target="cuda"))


def test_barrier_between_the_shared_write_and_the_read():
    out = thread_sync(_lowered("block"))
    block = out.body
    fill, barrier, use = block.body.body.stmts
    assert isinstance(barrier, S.Barrier) and barrier.scope == "shared"
    assert nodes(fill, S.BufferStore)[0].buffer.name == "B"
    assert nodes(use, S.BufferStore)[0].buffer.name == "C"


def test_loop_that_reads_and_writes_shared_memory_ends_with_a_barrier():
    sh = S.Buffer("sh", (E.const(8),), "float32", "shared")
    out_buf = S.Buffer("out", (E.const(8),), "float32")
    k, tx = E.Var("k"), E.Var("tx")
    step = S.seq(
        loop(tx, 8, S.BufferStore(sh, E.FloatImm(1.0), (tx,)), S.ForKind.THREAD_BINDING,
             "threadIdx.x"),
        loop(tx, 8, S.BufferStore(out_buf, E.BufferLoad(sh, (7 - tx,)), (tx,)),
             S.ForKind.THREAD_BINDING, "threadIdx.x"))
    f = func([out_buf], S.Allocate(sh, loop(k, 4, step)))
    body = thread_sync(f).body.body.body.stmts
    assert [type(x).__name__ for x in body] == ["For", "Barrier", "For", "Barrier"]


def test_no_barrier_where_each_thread_reads_its_own_data():
    f = _lowered("thread")
    assert str(thread_sync(f)) == str(f)
    assert not nodes(thread_sync(_lowered("root")).body, S.Barrier)


def test_barrier_under_a_thread_dependent_condition_is_refused():
    sh = S.Buffer("sh", (E.const(8),), "float32", "shared")
    out_buf = S.Buffer("out", (E.const(8),), "float32")
    tx = E.Var("tx")
    write = S.BufferStore(sh, E.FloatImm(1.0), (tx,))
    read = S.BufferStore(out_buf, E.BufferLoad(sh, (7 - tx,)), (tx,))
    body = loop(tx, 8, S.IfThenElse(tx < 4, S.seq(write, read)), S.ForKind.THREAD_BINDING,
                "threadIdx.x")
    with pytest.raises(tdsl.BuildError, match="thread-dependent condition"):
        thread_sync(func([out_buf], S.Allocate(sh, body)))
