"""CPU rule for reductions: vectorized along the contiguous axis (rfactor over the lanes when
that is the reduction axis, with several vectors of independent partial sums, added as
vectors by a second rfactor before one vector's lanes are summed); long
reductions with too few outputs to keep the cores busy are split by rfactor into parallel
partial sums."""
from __future__ import annotations

from .. import dtype as dt
from .. import tiling
from .analysis import StageInfo
from .cpu_base import BIG, PAR_MIN_WORK, RFACTOR_MIN_REDUCE, CPUBase


class ReductionRules(CPUBase):
    def reduction(self, st, lvl, members):
        info = self.infos[st]
        axes = list(st.op.axis)
        work = info.outputs(BIG) * info.reduce_size(BIG)
        if not members and info.outputs(BIG) < self.chunks and info.reduce_size(BIG) >= RFACTOR_MIN_REDUCE \
                and self.p.parallel:
            self.parallel_rfactor(st)
            return
        if lvl:
            loop = self.row_loop(st, axes[:lvl], info.extents[:lvl], work)
            self.attach_members(st, loop, members, lvl)
            self.reduce_inner(st, axes[lvl:], None)
            return
        self.reduce_inner(st, axes, work)

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
            nvec = max(1, min(self.p.unroll, (kext or BIG) // lanes))
            width = lanes * nvec
            ko, ki = st.split(k, factor=width)
            rf = self.s.rfactor(st.op.output(0), ki)
            rst = self.s[rf]
            rfs = [rst]
            if nvec > 1:
                # the vectors of partial sums are added as vectors first: the serial sum
                # that is left has one vector's lanes, not nvec's
                (rv,) = st.op.reduce_axis
                _, rvi = st.split(rv, factor=lanes)
                rfs.append(self.s[self.s.rfactor(st.op.output(0), rvi)])
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
            if ext is None or tiling.worth_a_vector(self.t, ext, dtype):
                # whole vectors and a ragged last one, not a narrower vector that divides
                # the row: every lane of an odd-width vector pays for the masks that the
                # reduction's reads carry (a padded or strided stencil's bounds tests):
                # depthwise 3x3 on 56-wide rows measured 5.8x faster with 16 lanes than 14
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
        4): 256-bit loads. A row sum of 8192^2 floats on Zen 4 read 28.6 GB/s with them on
        one thread against 25.7 with 512-bit loads (torch 28.1); on two threads 49-51
        against 42-46 in two runs, though in runs where the machine's bandwidth swung
        (32-46 GB/s) the two were within noise."""
        t = self.t
        if t.vector_bits < 512 or t.fma_units != 1 or not t.cache_bytes(3):
            return False
        size = info.outputs(0) * info.reduce_size(0) * (dt.bits(dtype) // 8)
        return size > t.cache_bytes(3)

    def parallel_rfactor(self, st):
        info = self.infos[st]
        raxes = list(st.op.reduce_axis)
        # the outermost reduction axis with enough steps: splitting it keeps the inner one
        # contiguous inside each task
        n = next((i for i, e in enumerate(info.rextents) if e is None or e >= self.chunks), len(raxes) - 1)
        k = raxes[n]
        ko, ki = st.split(k, nparts=self.chunks)
        rf = self.s.rfactor(st.op.output(0), ko)
        rst = self.s[rf]
        rinfo = StageInfo(rf.op)
        self.infos[rst] = rinfo
        self.rec.add(st, "rfactor-parallel", f"split({k.var.name}, nparts={self.chunks}); rfactor",
                     f"{info.outputs(BIG)} output(s) and {info.reduce_size(BIG)} reduction steps: "
                     "partial sums in parallel, then one short sum")
        self.reduce_inner(rst, list(rst.op.axis), rinfo.outputs(BIG) * rinfo.reduce_size(BIG) + PAR_MIN_WORK)

