"""lower_mma_fragments: tensor-core accumulators (scope "mma.accumulator") become small
per-lane arrays in registers.

A stage in that scope is a block of R x W float32 that the 32 lanes of a warp hold
together in the layout of `mma.sync.m16n8k16` (`tdsl.codegen.source.tensor_ops.LAYOUT`):
each lane has 4 elements of every 16 x 8 block, so its share is R * W / 32 floats, and the
block starting at row r, column c is the lane's elements from ((r / 16) * (W / 8) + c / 8) * 4.
This pass replaces each such buffer by that "local" array (per thread, like any local
buffer) and each fragment call's pointer into it by the pointer to the lane's elements.

Only the calls in `intrin_cuda.FRAGMENT_CALLS` (the mma, its fill, the store) know that
layout; any other read or write of the buffer would see elements that are not there, so it
is a LoweringError naming the stage. The pointers must not depend on a thread index: an
accumulator allocated outside the warp's loop holds every warp's tile in every lane, and
indices that differ across warps keep it out of registers.
"""
from __future__ import annotations

from .. import arith
from ..errors import LoweringError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.expr import Range
from ..ir.visitor import Mutator, free_vars
from ..te.intrin_cuda import ACCUMULATOR, FRAGMENT_CALLS, M, N

LANES = 32


def _error(buf, msg):
    return LoweringError(f"stage '{buf.name}' (scope '{ACCUMULATOR}'): {msg}")


class _Fragments(Mutator):
    def __init__(self):
        self.frags = {}         # accumulator buffer -> (per-lane buffer, its width W)
        self.ranges = {}
        self.threads = {}       # var of an enclosing thread-bound loop -> its tag
        self.in_call = None     # the fragment call whose arguments are being visited

    def visit_For(self, f):
        old = self.ranges
        self.ranges = {**old, f.var: Range(f.min, f.extent)}
        if f.kind is S.ForKind.THREAD_BINDING:
            self.threads[f.var] = f.thread_tag
        try:
            body = self.visit(f.body)
        finally:
            self.ranges = old
            self.threads.pop(f.var, None)
        return f if body is f.body else S.For(f.var, f.min, f.extent, f.kind, body,
                                               f.thread_tag, f.pragmas)

    def visit_Allocate(self, a):
        buf = a.buffer
        if buf.scope != ACCUMULATOR:
            return super().generic_visit(a)
        tags = set(self.threads.values())
        if not tags:
            raise _error(buf, "is allocated outside every kernel; compute_at it inside the "
                         "loop bound to the warps (threadIdx.y/z)")
        if "threadIdx.x" in tags:
            raise _error(buf, "is allocated inside a loop bound to threadIdx.x; the 32 lanes "
                         "of a warp hold it together: compute_at it at the warp's loop")
        shape = [arith.simplify(d) for d in buf.shape]
        if buf.dtype != "float32" or len(shape) != 2 or \
                not all(isinstance(d, E.IntImm) for d in shape) or \
                shape[0].value % M or shape[1].value % N:
            raise _error(buf, f"holds {buf.dtype} {list(buf.shape)}; an accumulator is a "
                         f"float32 matrix of whole {M} x {N} blocks")
        rows, width = shape[0].value, shape[1].value
        lane = S.Buffer(buf.name, (E.const(rows * width // LANES),), "float32", "local")
        self.frags[buf] = (lane, width)
        return S.Allocate(lane, self.visit(a.body))

    def visit_Call(self, e):
        if e.name in FRAGMENT_CALLS:
            outer, self.in_call = self.in_call, e
            try:
                return super().generic_visit(e)
            finally:
                self.in_call = outer
        if e.name == "address_of" and e.args[0].buffer in self.frags:
            if self.in_call is None:
                raise _error(e.args[0].buffer, "a pointer to it is passed to a call that is "
                             "not a fragment intrinsic (mma_m16n8k16, its fill, mma_store): "
                             "only they know which elements each lane holds")
            return E.Call("address_of", (self._lane_ptr(e.args[0]),) + e.args[1:], e.dtype)
        return super().generic_visit(e)

    def _lane_ptr(self, load):
        buf = load.buffer
        lane, width = self.frags[buf]
        r, c = (arith.simplify(i, self.ranges) for i in load.indices)
        threads = [v for v in free_vars(r) | free_vars(c) if v in self.threads]
        if threads:
            tags = ", ".join(sorted({self.threads[v] for v in threads}))
            raise _error(buf, f"the block at [{r}, {c}] depends on {tags}: allocated outside "
                         "the warp's loop, it would hold every warp's tile in every lane; "
                         "compute_at it at the loop bound to the warps")
        if not (arith.is_divisible(r, E.const(M), self.ranges)
                and arith.is_divisible(c, E.const(N), self.ranges)):
            raise _error(buf, f"a fragment call's block starts at [{r}, {c}], not at a "
                         f"multiple of {M} rows and {N} columns")
        idx = arith.simplify((r // M * (width // N) + c // N) * 4, self.ranges)
        return E.BufferLoad(lane, (idx,))

    def _touch(self, buf, what):
        if buf in self.frags:
            raise _error(buf, f"{what} it directly; its elements are spread over the "
                         "registers of a warp's lanes, so only the fragment intrinsics may "
                         "touch it: tensorize its init and update with "
                         "intrin_cuda.mma_m16n8k16 and its reader with intrin_cuda.mma_store")

    def visit_BufferLoad(self, e):
        self._touch(e.buffer, "a stage reads")
        return super().generic_visit(e)

    def visit_BufferStore(self, s):
        self._touch(s.buffer, "a loop stores to")
        return super().generic_visit(s)


def lower_mma_fragments(func: S.PrimFunc) -> S.PrimFunc:
    body = _Fragments().visit(func.body)
    return func if body is func.body else func.with_body(body)
