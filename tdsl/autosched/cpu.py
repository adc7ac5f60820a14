"""Sketch rules for CPU targets ("llvm", and "c", which compiles the same loop nest).

The order of the rules, and why:
1. inline: elementwise stages are inlined into their readers (no buffer, no extra pass over
   memory), except the operands of contractions (materialized once: the tile's inner loop
   then reads plain memory instead of recomputing per use) and expensive stages read more
   than once (an exp read by a row sum and a division is computed once).
   A pointwise stage read at several shifted taps whose recomputation would cost more than
   a store and loads is instead computed per tile of its consumer (cpu_stencil.py).
2. groups: a stage that is read only by one loop nest, at indices that are that nest's own
   leading loop variables, is computed at that loop (softmax's row max and row sum inside the
   output's row loop): its data is produced and consumed while in cache.
3. per group owner, by kind:
   - a uint8 x int8 or bfloat16 contraction on a CPU with a dot-product instruction:
     B packed into the instruction's layout, a register tile tensorized (cpu_tensorize.py);
   - contraction (some operand is reused along a spatial axis: matmul, conv, batch matmul):
     a register tile (rows x vectors, sized by tiling.register_tile from the target's
     vector lanes, registers and FMA units) accumulates in a local cache_write buffer (or in
     the producer itself, computed inside its elementwise consumer's tile: the epilogue
     fusion); the reused operand's strided panel is copied once per column of tiles (packing);
     when the operands are contiguous along the reduction instead (A @ B.T), a dot-product
     tile: rows x cols vectors of partial sums along the reduction (rfactor, lanes last);
   - reduction: vectorized along the contiguous axis (rfactor over the lanes when that is
     the reduction axis); long reductions with too few outputs to keep the cores busy are
     split by rfactor into parallel partial sums;
   - elementwise: vectorized and unrolled along the last axis.
   Outer loops are fused until there are enough parallel tasks (tiling.parallel_chunks),
   never fusing a loop whose tiles are ragged (the fused loop would keep the tail's guard in
   its body; alone, loop partitioning peels the tail off).
"""
from __future__ import annotations

from .. import dtype as dt
from .. import tiling
from ..arith import linear_coeff, simplify
from ..ir.visitor import substitute, uses_var
from ..schedule.store_with import store_with_holds
from ..te.tensor import ComputeOp
from .cpu_base import BIG
from .cpu_contraction import ContractionRules
from .cpu_reduce import ReductionRules
from .cpu_stencil import StencilRules
from .cpu_tensorize import TensorizeRules


class CPUScheduler(TensorizeRules, ContractionRules, ReductionRules, StencilRules):
    # ------------------------------------------------------------------ rule 1: inline
    def inline(self):
        inlined = set()
        plan, self.stencil = self.stencil_plan(), set()
        for st in reversed(self.comp):
            info = self.infos[st]
            if st.is_output or info.is_reduction:
                continue
            readers = self.eff_readers(st, inlined)
            tiled = [c for c in readers if self.infos[c].is_reuse_reduction()]
            if tiled:
                self.rec.add(st, "materialize", "compute_root",
                             f"operand of contraction '{tiled[0].op.name}': computed once, not per "
                             "use in the register tile")
                continue
            if st in plan:
                self.stencil.add(st)
                self.rec.add(st, "stencil", "materialize per tile", plan[st])
                continue
            nreads = sum(len(self.infos[c].loads_of(st.op.output(0))) for c in self.readers[st])
            if info.expensive and (len(readers) > 1 or nreads > 1):
                self.rec.add(st, "materialize", "kept", "calls a costly intrinsic and is read "
                             f"{nreads} times: computed once")
                continue
            st.compute_inline()
            inlined.add(st)
            self.rec.add(st, "inline", "compute_inline", "elementwise: computed where it is read")
        return inlined

    # ------------------------------------------------------------------ rule 2: groups
    def groups(self, inlined):
        """attach[st] = (owner, level): st is computed inside owner's first `level` loops."""
        attach, level = {}, {}
        for st in reversed(self.comp):
            if st in inlined or st.is_output or self.infos[st].is_reuse_reduction() or \
                    st in self.stencil:
                continue
            readers = self.eff_readers(st, inlined)
            if any(c in self.stencil for c in readers):
                continue
            owners = {attach[c][0] if c in attach else c for c in readers}
            if len(owners) != 1:
                continue      # read by several loop nests: root
            (owner,) = owners
            if self.infos[owner].is_reuse_reduction():
                continue
            d = len(st.op.axis)
            for c in readers:
                limit = attach[c][1] if c in attach else len(self.infos[c].axes)
                d = min(d, self.read_prefix(st, c, inlined, limit))
            if d >= 1:
                attach[st] = (owner, d)
                level[owner] = min(level.get(owner, d), d)
        return attach, level

    # ------------------------------------------------------------------ run
    def run(self):
        inlined = self.inlined = self.inline()
        attach, level = self.groups(inlined)
        tiles = self.stencil_groups(inlined, attach, level)
        epilogue = {}
        for st in self.comp:
            if st in inlined or not self.infos[st].is_reuse_reduction() or st.is_output:
                continue
            readers = self.eff_readers(st, inlined)
            if len(readers) == 1:
                T = readers[0]
                ti = self.infos[T]
                if not ti.is_reduction and T not in attach and T not in level and T not in epilogue and \
                        len(ti.axes) == len(self.infos[st].axes) and self.identity_reads(st, T, inlined):
                    epilogue[T] = st
        for st in reversed(self.comp):
            if st in inlined or st in attach or st in self.stencil or \
                    any(st is r for r in epilogue.values()):
                continue
            info = self.infos[st]
            if st in tiles:
                self.stencil_tile(st, tiles[st], inlined)
                continue
            members = [m for m in self.comp if attach.get(m, (None,))[0] is st]
            if st in epilogue:
                R = epilogue[st]
                if self.dot_tensorize(R, st):
                    continue
                (self.dot_tile if self.dot_layout(R) else self.tile)(R, st)
            elif info.is_reuse_reduction():
                if self.dot_tensorize(st, None):
                    continue
                (self.dot_tile if self.dot_layout(st) else self.tile)(st, None)
            elif info.is_reduction:
                self.reduction(st, level.get(st, 0), members)
            else:
                self.elementwise(st, level.get(st, 0), members)

    def read_prefix(self, st, c, inlined, limit) -> int:
        """How many of c's leading loop variables (at most `limit`) index every read of st
        on the way to c, itself or through inlined stages (`1 / sum[i]` inlined into c):
        st computed inside that many of c's loops has what each iteration reads."""
        def prefix(reader, producer, n):
            info = self.infos[reader]
            for ld in info.loads_of(producer.op.output(0)):
                k = 0
                while k < min(n, len(ld.indices), len(info.axes)) and \
                        ld.index_is_axis(k, info.axes[k]):
                    k += 1
                n = min(n, k)
            return n
        n = prefix(c, st, limit) if c in self.readers[st] else limit
        for m in self.readers[st]:
            if m in inlined and c in self.eff_readers(m, inlined):
                n = min(n, prefix(m, st, self.read_prefix(m, c, inlined, n)))
        return n

    def identity_reads(self, st, T, inlined) -> bool:
        """Every read of st on the way to T (through inlined stages) is at the reader's own
        loop variables, in order: T's element (i, j) needs exactly st's element (i, j)."""
        for c in self.readers[st]:
            ci = self.infos[c]
            if len(ci.axes) != len(self.infos[st].axes) or ci.is_reduction:
                return False
            for ld in ci.loads_of(st.op.output(0)):
                if not all(ld.index_is_axis(n, ci.axes[n]) for n in range(len(ci.axes))):
                    return False
            if c is not T and not (c in inlined and self.identity_reads(c, T, inlined)):
                return False
        return True

    # ------------------------------------------------------------------ owners
    def attach_members(self, st, loop, members, lvl):
        for m in members:
            ms = self.s[m]
            ms.compute_at(st, loop)
            self.rec.add(m, "compute_at", f"compute_at({st.op.name}, {loop.var.name})",
                         f"read by '{st.op.name}' at its own first {lvl} loop variable(s): produced "
                         "and consumed while in cache")
            self.inner(m, lvl)

    def inner(self, m, lvl):
        """The loops of a stage computed inside another's first `lvl` loops."""
        info = self.infos[m]
        axes = list(m.op.axis)
        if info.is_reduction:
            self.reduce_inner(m, axes[lvl:], None)
        elif len(axes) > lvl:
            self.vector_split(m, axes[-1], info.extents[-1], m.op.output(0).dtype)

    def store_in_output(self, st, members):  # called once the members are scheduled
        """A costly elementwise member (kept, not inlined: softmax's exponentials) of the
        output's shape and dtype is stored in the output's buffer (`store_with`) where the
        whole schedule passes store_with's checks (read by the output only at its own
        indices, by the other members at the same loop, over exactly the output's region):
        the output's cache lines are fetched while the costly values are computed, and the
        output's own pass rewrites them in cache."""
        if not st.is_output:
            return
        out = st.op.output(0)
        for m in members:
            t = m.op.output(0)
            if self.infos[m].is_reduction or m.op.num_outputs != 1 or t.dtype != out.dtype or \
                    self.infos[m].extents != self.infos[st].extents:
                continue
            m.stored_with = st          # tried on the whole schedule before it is asked for
            holds = store_with_holds(self.s)
            m.stored_with = None
            if not holds:   # e.g. a reduction split that does not divide the row reads past it
                continue
            m.store_with(out)
            self.rec.add(m, "store_with", f"store_with({out.name})",
                         f"read by '{st.op.name}' only at its own indices: written where the "
                         "output goes, whose lines are then fetched while it is computed")

    def elementwise(self, st, lvl, members):
        info = self.infos[st]
        axes, exts = list(st.op.axis), list(info.extents)
        if not axes:
            return
        dtype = st.op.output(0).dtype
        work = info.outputs(BIG)
        if lvl:
            loop = self.row_loop(st, axes[:lvl], exts[:lvl], work)
            if len(axes) > lvl:
                self.vector_split(st, axes[-1], exts[-1], dtype)
            self.attach_members(st, loop, members, lvl)
            self.store_in_output(st, members)
            return
        if self.transposed(st, info, dtype, work):
            return
        vs = self.vector_split(st, axes[-1], exts[-1], dtype)
        loops = [(iv, e, False) for iv, e in zip(axes[:-1], exts[:-1])]
        if vs is not None:
            loops.append(vs)
        else:
            loops.append((axes[-1], exts[-1], False))
        self.parallel_prefix(st, loops, work, "elementwise")

    def transposed(self, st, info, dtype, work) -> bool:
        """A transpose (an input read contiguously along another axis than the output's
        last, and strided along the last, itself or through inlined stages): square tiles,
        the other axis split by the tile and unrolled just outside the vector loop, so the
        backend reads each tile as rows and transposes it in registers instead of
        gathering every vector."""
        axes, exts = info.axes, info.extents
        if not self.can_vectorize(dtype) or len(axes) < 2 or None in exts:
            return False
        ranges = {iv.var: iv.dom for iv in axes}
        last = axes[-1].var
        for tensor, idx in self.memory_loads(st):
            idx = [simplify(i, ranges) for i in idx]
            if not idx or dt.itemsize(tensor.dtype) != dt.itemsize(dtype) or \
                    not any(uses_var(i, last) for i in idx[:-1]) or uses_var(idx[-1], last):
                continue
            k = next((k for k, iv in enumerate(axes[:-1])
                      if (linear_coeff(idx[-1], iv.var, ranges) or (0,))[0] == 1), None)
            n = 0 if k is None else tiling.transpose_tile(self.t, exts[k], exts[-1], dtype)
            if n:
                break
        else:
            return False
        vo, vi = st.split(axes[-1], factor=n)
        ko, ki = st.split(axes[k], factor=n)
        outer = [ko if iv is axes[k] else iv for iv in axes[:-1]] + [vo]
        st.reorder(*outer, ki, vi)
        st.unroll(ki)
        st.vectorize(vi)
        self.rec.add(st, "vectorize", f"split({last.name}, {n}), split({axes[k].var.name}, "
                     f"{n}); unroll {axes[k].var.name}.inner; vectorize",
                     f"reads '{tensor.name}' transposed: {n} x {n} tiles transposed in registers")
        oext = [e // n if i == k else e for i, e in enumerate(exts[:-1])] + [-(-exts[-1] // n)]
        ragged = [False] * (len(outer) - 1) + [exts[-1] % n != 0]
        self.parallel_prefix(st, list(zip(outer, oext, ragged)), work, "elementwise")
        return True

    def memory_loads(self, st):
        """(tensor, indices in st's axes) of every read of st from memory, through the
        stages inlined into it (their index maps composed)."""
        out = []
        for ld in self.infos[st].loads:
            p = self.s[ld.tensor.op] if isinstance(ld.tensor.op, ComputeOp) else None
            if p is None or p not in self.inlined:
                out.append((ld.tensor, ld.indices))
                continue
            vmap = {iv.var: i for iv, i in zip(p.op.axis, ld.indices)}
            out += [(t, tuple(substitute(i, vmap) for i in idx)) for t, idx in self.memory_loads(p)]
        return out


def schedule_cpu(s, target, rec, params):
    CPUScheduler(s, target, rec, params).run()
