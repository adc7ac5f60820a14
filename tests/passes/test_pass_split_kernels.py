"""split_kernels alone: each top-level loop nest bound to the grid is one kernel, with its
launch extents, its shared memory and the parameters it uses; buffers at root are the
host's; a nest that is not bound to the grid is refused."""
import pytest

import tdsl
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.gpu import gpu_storage_scope, split_kernels

from pass_ir import before, func, gpu_reverse_rows, loop


def _lowered(at):
    s, args = gpu_reverse_rows(at)
    return before("split_kernels", s, args, target="cuda")


def test_one_kernel_with_its_launch_and_shared_memory():
    f = _lowered("block")
    assert "kernels" not in f.attrs
    out = split_kernels(f)
    (k,) = out.attrs["kernels"]
    assert k.name == "main_kernel"
    assert k.grid == (8, 1, 1) and k.block == (8, 1, 1)
    assert [b.name for b in k.shared] == ["B"] and k.shared_bytes == 32
    assert [p.name for p in k.params] == ["A", "C"]
    assert out.attrs["host_buffers"] == []
    assert out.body is f.body                     # the host function keeps the whole body


def test_nests_at_root_are_kernels_in_order_with_a_host_buffer():
    out = split_kernels(_lowered("root"))
    k0, k1 = out.attrs["kernels"]
    assert (k0.name, k1.name) == ("main_kernel0", "main_kernel1")
    (host,) = out.attrs["host_buffers"]
    assert host.name == "B" and host.scope == "global"
    assert [p.name for p in k0.params] == ["A", "B"]
    assert [p.name for p in k1.params] == ["C", "B"]


def test_nest_not_bound_to_the_grid_is_refused():
    A = S.Buffer("A", (E.const(8),), "float32")
    i = E.Var("i")
    f = gpu_storage_scope(func([A], loop(i, 8, S.BufferStore(A, E.FloatImm(0.0), (i,)))))
    with pytest.raises(tdsl.BuildError, match="does not start with a loop bound"):
        split_kernels(f)
