"""lower_mma_fragments alone: a tensor-core accumulator ("mma.accumulator", R x W float32
held by a warp's 32 lanes) becomes a local array of R * W / 32 floats per lane, and the
fragment calls' pointers point into it; a direct access is refused; functions without
accumulators are returned as they are."""
import pytest

import tdsl
from tdsl.examples import mma_gemm
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.mma_fragments import lower_mma_fragments
from tdsl.te.intrin_cuda import ACCUMULATOR

from pass_ir import before, func, loop, nodes


def _gemm():
    s, args = mma_gemm.schedule(32, 16, 16, "float16", warps=(1, 1), warp_tiles=(2, 2),
                                k_step=16)
    return before("lower_mma_fragments", s, args, target="cuda")


def test_accumulator_becomes_a_per_lane_local_array():
    f = _gemm()
    assert 'C.mma.accumulator = allocate((32, 16), float32, "mma.accumulator")' in str(f)
    out = lower_mma_fragments(f)
    text = str(out)
    assert 'C.mma.accumulator = allocate((16), float32, "local")' in text   # 32 * 16 / 32
    assert "cuda.mma_fill_m16n8(address_of(C.mma.accumulator[0], 2), 16, 2, 2)" in text
    assert "address_of(C.mma.accumulator[0], 1), 16, 16, 2, 2)" in text     # the store
    assert all(a.buffer.scope != ACCUMULATOR for a in nodes(out.body, S.Allocate))


def test_direct_access_of_an_accumulator_is_refused():
    acc = S.Buffer("acc", (E.const(16), E.const(8)), "float32", ACCUMULATOR)
    out = S.Buffer("out", (E.const(16), E.const(8)), "float32")
    ty = E.Var("ty")
    body = S.BufferStore(out, E.BufferLoad(acc, (E.const(0), E.const(0))),
                         (E.const(0), E.const(0)))
    f = func([out], loop(ty, 1, S.Allocate(acc, body), S.ForKind.THREAD_BINDING,
                         "threadIdx.y"))
    with pytest.raises(tdsl.LoweringError, match="only the fragment intrinsics"):
        lower_mma_fragments(f)


def test_function_without_accumulators_is_returned_as_is():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((8,), lambda i: A[i] * 2.0, name="B")
    f = before("lower_mma_fragments", tdsl.create_schedule(B), [A, B])
    assert lower_mma_fragments(f) is f
    assert not [a for a in nodes(f.body, S.Allocate)]
