"""gpu_storage_scope alone: a "global" buffer allocated inside a kernel gets the storage it
can have there, "shared" at the block and "local" inside a thread loop; buffers allocated
by the host (at root) and buffers with a scope of their own are left alone."""
from tdsl.ir import stmt as S
from tdsl.passes.gpu import gpu_storage_scope

from pass_ir import before, gpu_reverse_rows, nodes


def _scopes(func):
    return {a.buffer.name: a.buffer.scope for a in nodes(func.body, S.Allocate)}


def _lowered(at):
    s, args = gpu_reverse_rows(at)
    return before("gpu_storage_scope", s, args, target="cuda")


def test_buffer_at_the_block_becomes_shared():
    f = _lowered("block")
    assert _scopes(f) == {"B": "global"}
    out = gpu_storage_scope(f)
    assert _scopes(out) == {"B": "shared"}
    # every access names the new buffer
    assert {x.buffer.scope for x in nodes(out.body, S.BufferStore) if x.buffer.name == "B"} \
        == {"shared"}


def test_buffer_inside_a_thread_becomes_local():
    assert _scopes(gpu_storage_scope(_lowered("thread"))) == {"B": "local"}


def test_buffer_allocated_by_the_host_stays_global():
    f = _lowered("root")
    assert str(gpu_storage_scope(f)) == str(f)
    assert _scopes(f) == {"B": "global"}
