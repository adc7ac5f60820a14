"""What every CPU rule shares: the sizes a rule assumes, and the helpers that fuse a parallel
prefix, pick a row loop, split a vector off an axis and vectorize a reduction's loops (each
logs its reason), on the rules' context."""
from __future__ import annotations

from typing import List, Optional, Tuple

from .. import dtype as dt
from .. import arith, tiling
from ..arith import simplify
from ..ir import expr as E
from ..ir.expr import Range
from ..ir.visitor import free_vars
from .analysis import StageInfo
from .context import Context

BIG = 1024                  # what a symbolic extent is assumed to be when sizing
PAR_MIN_WORK = 1 << 15      # below this (elements x reduction steps) a fork-join costs more
RFACTOR_MIN_REDUCE = 1 << 14


class CPUBase(Context):
    """The context of the CPU rules with the helpers they share (each logs its reason)."""

    def __init__(self, sched, target, rec, params):
        super().__init__(sched, target, rec, params)
        self.chunks = params.chunks or tiling.parallel_chunks(target)
        # the plan (cpu.CPUContext): stencil stages, compute_at groups, fused epilogues
        self.stencil_plan = {}      # {stage: why}: computed per tile of its consumer
        self.stencil = set()        # the stages kept for that by the inline phase
        self.tiles = {}             # {owner: stencil members}
        self.attach = {}            # {stage: (owner, loops)}: computed in owner's loops
        self.level = {}             # {owner: the fewest loops a member needs}
        self.epilogue = {}          # {T: R}: contraction R computed in T's register tile

    def contraction_of(self, st):
        """(R, T) when the schedule phase tiles contraction R at `st` (T: its fused
        elementwise consumer, `st` itself, or None when `st` is R); else None."""
        if st in self.epilogue:
            return self.epilogue[st], st
        return (st, None) if self.infos[st].is_reuse_reduction() else None

    # ------------------------------------------------------------------ helpers
    def lanes(self, dtype):
        return self.target.vector_lanes(dtype)

    def can_vectorize(self, dtype):
        return self.params.vectorize and dtype != "bool"

    def parallel_prefix(self, st, loops: List[Tuple[object, Optional[int], bool]], work: int,
                        what: str, whole=False, work_expr=None):
        """Fuses a prefix of `loops` ((iv, extent, ragged), adjacent leaf loops outermost
        first) until there are enough tasks and marks it parallel. Returns the loop that
        stands for the prefix (fused or not), or None when nothing was fused. Where `work`
        was guessed from symbolic extents, `work_expr` (default: the stage's elements x
        reduction steps) is it in the sizes, and the loop forks only when it reaches
        PAR_MIN_WORK at run time (pragma "parallel_when")."""
        if not loops:
            return None
        # the outermost loop, symbolic, may be 1 at run time (a batch of one): the prefix
        # goes on fusing past it. A symbolic extent further in (a sequence, a signal) is
        # split into a constant number of parts and its outer part fused, as row_chunks
        # does for convolutions: fusing the loop itself would cost every iteration of the
        # fused loop (an output vector, where it is the innermost) a division by its
        # run-time size to recover the indices. Where the parts are small, so is the
        # work, and the loop does not fork then (parallel_when). `whole` (rows that
        # stages attach to) fuses every loop as it is
        chosen, known, symbolic = [], 1, False
        for iv, ext, ragged in loops:
            if chosen and ragged and not whole:
                break
            if chosen and ext is None and not whole:
                parts = -(-self.chunks // known)
                outer, _ = st.split(iv, nparts=parts)
                chosen.append((outer, parts))
                known *= parts
                break
            chosen.append((iv, ext))
            if ext is None:
                symbolic = True
                known *= BIG if len(chosen) > 1 else 1
            else:
                known *= ext
            if not whole and (ragged or known >= self.chunks):
                break
        tasks = max(known, BIG) if symbolic else known
        ivs = [iv for iv, _ in chosen]
        loop = st.fuse(*ivs) if len(ivs) > 1 else ivs[0]
        if not self.params.parallel:
            return loop
        if work < PAR_MIN_WORK or tasks < 2:
            self.rec.add(st, "parallel", "none", f"{work} elements x steps: a fork-join costs more "
                         "than it saves" if work < PAR_MIN_WORK else "one task only")
            return loop
        st.parallel(loop)
        if work_expr is None:
            work_expr = (self.infos.get(st) or StageInfo(st.op)).work_expr()
        work_expr = simplify(work_expr)
        if not isinstance(work_expr, E.IntImm):
            st.pragma(loop, "parallel_when", E.GE(work_expr, E.const(PAR_MIN_WORK, "int64")))
        names = ", ".join(iv.var.name for iv in ivs)
        why = f"{tasks if tasks < BIG else 'symbolic/many'} tasks for {self.target.num_cores} cores"
        if len(ivs) < len(loops) and loops[len(ivs)][2]:
            why += "; the next loop has ragged tiles and is left unfused so its tail is peeled"
        self.rec.add(st, "parallel", f"parallel(fuse({names}))" if len(ivs) > 1 else
                     f"parallel({names})", why + f" ({what})")
        return loop

    def row_loop(self, st, axes, exts, work):
        """The loop that stages computed per row attach to: the leading axes fused, parallel
        (bound inference takes a row of a fused loop exactly, symbolic extents included)."""
        loops = [(iv, e, False) for iv, e in zip(axes, exts)]
        return self.parallel_prefix(st, loops, work, "rows", whole=True)

    def tail(self, st, iv, ext, factor):
        """The `tail` of a split of `iv` by `factor`: "shift" (ShiftInwards, one copy of
        the tile and no guard) where `iv` is a root axis of a run-time extent
        (`ext` None) that `params.least` makes at least `factor`, on a stage with no
        reduction of its own (`Stage.split` refuses anything else that is not pure);
        "guard" otherwise, and for every fixed extent."""
        least = self.params.least
        if ext is not None or not least or factor <= 1 or st.op.reduce_axis or iv.dom is None \
                or iv not in st.op.axis:
            return "guard"
        dom = iv.dom.extent
        facts = {v: Range(E.const(least[v.name], v.dtype), E.const(2**31 - 1 - least[v.name], v.dtype))
                 for v in free_vars(dom) if v.name in least}
        return "shift" if arith.can_prove(E.GE(dom, E.const(factor, dom.dtype)), facts) else "guard"

    def vector_split(self, st, iv, ext, dtype, unroll=True):
        """Splits `iv` by the vector width (and an unrolled group of vectors) and vectorizes;
        returns (outer loop, its extent, ragged) or None when not worth a vector."""
        lanes = self.lanes(dtype)
        if not self.can_vectorize(dtype) or lanes < 2 or (ext is not None and not tiling.worth_a_vector(self.target, ext, dtype)):
            return None
        width = tiling.row_vector(self.target, ext, dtype) if ext is not None else lanes
        group = width * self.params.unroll
        if unroll and self.params.unroll > 1 and self.tail(st, iv, ext, group) == "shift":
            # a run-time row of a group or more: the last group shifted back onto the one
            # before, so the row has no tail of single vectors and no guarded group
            vo, vg = st.split(iv, factor=group, tail="shift")
            vu, vi = st.split(vg, factor=width)
            st.unroll(vu)
            st.vectorize(vi)
            self.rec.add(st, "vectorize", f"split({iv.var.name}, {group}, tail=shift); split by "
                         f"{width}; vectorize; unroll {self.params.unroll} vectors",
                         f"{width} x {dtype} lanes on {self.target.key}, along the contiguous last "
                         "axis; its last group shifted inwards")
            return vo, None, True
        vo, vi = st.split(iv, factor=width, tail=self.tail(st, iv, ext, width))
        st.vectorize(vi)
        oext = None if ext is None else -(-ext // width)
        ragged = ext is None or ext % width != 0
        action = f"split({iv.var.name}, {width}); vectorize"
        if unroll and self.params.unroll > 1 and (oext is None or oext >= 2 * self.params.unroll):
            vo, vu = st.split(vo, factor=self.params.unroll)
            st.unroll(vu)
            action += f"; unroll {self.params.unroll} vectors"
            ragged = ragged or oext is None or oext % self.params.unroll != 0
            oext = None if oext is None else -(-oext // self.params.unroll)
        self.rec.add(st, "vectorize", action,
                     f"{width} x {dtype} lanes on {self.target.key}, along the contiguous last axis")
        return vo, oext, ragged

    def reduce_inner(self, st, axes, work):
        """Vectorizes a reduction's loops over `axes` (its spatial axes still unscheduled);
        with `work`, the outer spatial loops are made parallel too."""
        info = self.infos.get(st) or StageInfo(st.op)
        dtype = st.op.output(0).dtype
        lanes = self.lanes(dtype)
        raxes = list(st.op.reduce_axis)
        k, kext = raxes[-1], info.rextents[-1]
        if info.reduce_contiguous() and self.streams_split_vectors(info, dtype):
            lanes //= 2
        if info.reduce_contiguous() and self.can_vectorize(dtype) and lanes >= 2 and \
                (kext is None or kext >= lanes):
            # several vectors of partial sums: independent add chains hide the add latency
            nvec = max(1, min(self.params.unroll, (kext or BIG) // lanes))
            width = lanes * nvec
            ko, ki = st.split(k, factor=width)
            rf = self.sched.rfactor(st.op.output(0), ki)
            rst = self.sched[rf]
            rfs = [rst]
            if nvec > 1:
                # the vectors of partial sums are added as vectors first: the serial sum
                # that is left has one vector's lanes, not nvec's
                (rv,) = st.op.reduce_axis
                _, rvi = st.split(rv, factor=lanes)
                rfs.append(self.sched[self.sched.rfactor(st.op.output(0), rvi)])
            # rfactor gives `st` fresh loops: it is made parallel after, not before
            loop = None
            if work is not None and axes:
                loop = self.parallel_prefix(st, [(iv, e, False) for iv, e in
                                                 zip(axes, info.extents[-len(axes):])], work, "outputs")
            leaves = [iv for iv in st.leaf_iter_vars if iv.kind != "reduce"]
            at = leaves[-1] if leaves else loop
            for r in rfs:
                if at is not None:
                    r.compute_at(st, at)
                # the partial sums as nvec unrolled vectors of `lanes`, not one vector of
                # `width`: LLVM splits an over-wide vector into its widest legal registers,
                # which would undo the 256-bit choice of streams_split_vectors
                vo, vi = r.split(r.op.axis[0], factor=lanes)
                r.reorder(*r.op.reduce_axis, vo, vi)     # the factored axis comes first
                r.unroll(vo)
                r.vectorize(vi)
            self.rec.add(st, "rfactor-vectorize", f"split({k.var.name}, {width}); rfactor; "
                         "vectorize the partial sums" + ("; rfactor again over the vectors" if nvec > 1 else ""),
                         f"the reduction axis is the contiguous one: {width} partial results per "
                         f"output ({nvec} vectors of {lanes} lanes: independent add chains), added "
                         f"as vectors, then {lanes} lanes serially")
            return
        if axes and self.can_vectorize(dtype):
            last = axes[-1]
            ext = info.extents[-1] if info.extents else None
            if ext is None or tiling.worth_a_vector(self.target, ext, dtype):
                # whole vectors and a ragged last one, not a narrower vector that divides
                # the row: every lane of an odd-width vector pays for the masks that the
                # reduction's reads carry (a padded or strided stencil's bounds tests), a
                # cost far above one ragged vector a row
                width = lanes if ext is None or ext > lanes else ext
                vo, vi = st.split(last, factor=width)
                st.reorder(*axes[:-1], vo, *raxes, vi)
                st.vectorize(vi)
                self.rec.add(st, "vectorize", f"split({last.var.name}, {width}); reduction loops "
                             "outside the lanes; vectorize", "the last spatial axis is contiguous: "
                             "a vector of outputs accumulates in a register")
                if work is not None:
                    oext = None if ext is None else -(-ext // width)
                    self.parallel_prefix(st, [(iv, e, False) for iv, e in zip(axes[:-1], info.extents[:-1])]
                                         + [(vo, oext, ext is None or ext % width != 0)], work, "outputs")
                return
        if work is not None and axes:
            self.parallel_prefix(st, [(iv, e, False) for iv, e in zip(axes, info.extents)], work, "outputs")

    def streams_split_vectors(self, info, dtype):
        """A reduction that streams its input from memory (more than the last-level cache)
        on a core whose 512-bit operations are split in two (one 512-bit FMA a cycle, Zen
        4): 256-bit loads, which such a core streams from memory at least as fast as
        512-bit ones (it splits those in two anyway)."""
        t = self.target
        if t.vector_bits < 512 or t.fma_units != 1 or not t.cache_bytes(3):
            return False
        size = info.outputs(0) * info.reduce_size(0) * (dt.bits(dtype) // 8)
        return size > t.cache_bytes(3)
