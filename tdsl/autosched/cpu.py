"""Sketch rules for CPU targets ("llvm", and "c", which compiles the same loop nest).

The order of the rules, and why:
1. inline: elementwise stages are inlined into their readers (no buffer, no extra pass over
   memory), except the operands of contractions (materialized once: the tile's inner loop
   then reads plain memory instead of recomputing per use) and expensive stages read more
   than once (an exp read by a row sum and a division is computed once).
2. groups: a stage that is read only by one loop nest, at indices that are that nest's own
   leading loop variables, is computed at that loop (softmax's row max and row sum inside the
   output's row loop): its data is produced and consumed while in cache.
3. per group owner, by kind:
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

from typing import Dict, List, Optional, Tuple

from .. import tiling
from ..te.tensor import ComputeOp
from .analysis import StageInfo, stage_infos

BIG = 1024                  # what a symbolic extent is assumed to be when sizing
PAR_MIN_WORK = 1 << 15      # below this (elements x reduction steps) a fork-join costs more
RFACTOR_MIN_REDUCE = 1 << 14


class CPUScheduler:
    def __init__(self, s, target, rec, params):
        self.s, self.t, self.rec, self.p = s, target, rec, params
        self.chunks = params.chunks or tiling.parallel_chunks(target)
        self.infos: Dict[object, StageInfo] = stage_infos(s)
        self.comp = [st for st in s.stages if st in self.infos]
        self.readers = {st: [c for c in self.comp if st in s.producers(c)] for st in self.comp}

    # ------------------------------------------------------------------ helpers
    def lanes(self, dtype):
        return self.t.vector_lanes(dtype)

    def can_vectorize(self, dtype):
        return self.p.vectorize and dtype != "bool"

    def eff_readers(self, st, inlined) -> List:
        """Readers once inlined stages are looked through."""
        out, todo = [], list(self.readers[st])
        while todo:
            c = todo.pop()
            if c in inlined:
                todo.extend(self.readers[c])
            elif c not in out:
                out.append(c)
        return out

    def leaf_ext(self, st, iv) -> Optional[int]:
        from ..schedule.bound import pass_down
        from .analysis import const_extent
        op = st.op
        rng = pass_down(st, {x: x.dom for x in list(op.axis) + list(op.reduce_axis)})
        return const_extent(rng[iv].extent)

    def parallel_prefix(self, st, loops: List[Tuple[object, Optional[int], bool]], work: int,
                        what: str, whole=False):
        """Fuses a prefix of `loops` ((iv, extent, ragged), adjacent leaf loops outermost
        first) until there are enough tasks and marks it parallel. Returns the loop that
        stands for the prefix (fused or not), or None when nothing was fused."""
        if not loops:
            return None
        chosen, tasks = [], 1
        for iv, ext, ragged in loops:
            if chosen and ragged and not whole:
                break
            chosen.append((iv, ext))
            tasks *= BIG if ext is None else ext
            if not whole and (ragged or tasks >= self.chunks):
                break
        ivs = [iv for iv, _ in chosen]
        loop = st.fuse(*ivs) if len(ivs) > 1 else ivs[0]
        if not self.p.parallel:
            return loop
        if work < PAR_MIN_WORK or tasks < 2:
            self.rec.add(st, "parallel", "none", f"{work} elements x steps: a fork-join costs more "
                         "than it saves" if work < PAR_MIN_WORK else "one task only")
            return loop
        st.parallel(loop)
        names = ", ".join(iv.var.name for iv in ivs)
        why = f"{tasks if tasks < BIG else 'symbolic/many'} tasks for {self.t.num_cores} cores"
        if len(ivs) < len(loops) and loops[len(ivs)][2]:
            why += "; the next loop has ragged tiles and is left unfused so its tail is peeled"
        self.rec.add(st, "parallel", f"parallel(fuse({names}))" if len(ivs) > 1 else
                     f"parallel({names})", why + f" ({what})")
        return loop

    def row_loop(self, st, axes, exts, work):
        """The loop that stages computed per row attach to: the fused leading axes when their
        extents are constant; with a symbolic one, the innermost of them unfused (bound
        inference cannot bound a region through a fused symbolic loop) and the first parallel."""
        loops = [(iv, e, False) for iv, e in zip(axes, exts)]
        if all(e is not None for e in exts):
            return self.parallel_prefix(st, loops, work, "rows", whole=True)
        self.parallel_prefix(st, loops[:1], work, "rows")
        return axes[-1]

    def vector_split(self, st, iv, ext, dtype, unroll=True):
        """Splits `iv` by the vector width (and an unrolled group of vectors) and vectorizes;
        returns (outer loop, its extent, ragged) or None when not worth a vector."""
        lanes = self.lanes(dtype)
        if not self.can_vectorize(dtype) or lanes < 2 or (ext is not None and ext < max(2, lanes // 2)):
            return None
        width = tiling.row_vector(self.t, ext, dtype) if ext is not None else lanes
        vo, vi = st.split(iv, factor=width)
        st.vectorize(vi)
        oext = None if ext is None else -(-ext // width)
        ragged = ext is None or ext % width != 0
        action = f"split({iv.var.name}, {width}); vectorize"
        if unroll and self.p.unroll > 1 and (oext is None or oext >= 2 * self.p.unroll):
            vo, vu = st.split(vo, factor=self.p.unroll)
            st.unroll(vu)
            action += f"; unroll {self.p.unroll} vectors"
            ragged = ragged or oext is None or oext % self.p.unroll != 0
            oext = None if oext is None else -(-oext // self.p.unroll)
        self.rec.add(st, "vectorize", action,
                     f"{width} x {dtype} lanes on {self.t.key}, along the contiguous last axis")
        return vo, oext, ragged

    # ------------------------------------------------------------------ rule 1: inline
    def inline(self):
        inlined = set()
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
            if st in inlined or st.is_output or self.infos[st].is_reuse_reduction():
                continue
            readers = self.eff_readers(st, inlined)
            owners = {attach[c][0] if c in attach else c for c in readers}
            if len(owners) != 1 or any(c not in self.readers[st] for c in readers):
                continue      # read by several loop nests, or through inlined stages: root
            (owner,) = owners
            if self.infos[owner].is_reuse_reduction():
                continue
            d = len(st.op.axis)
            for c in readers:
                cinfo = self.infos[c]
                limit = attach[c][1] if c in attach else len(cinfo.axes)
                for ld in cinfo.loads_of(st.op.output(0)):
                    n = 0
                    while n < min(limit, len(ld.indices), len(cinfo.axes)) and \
                            ld.index_is_axis(n, cinfo.axes[n]):
                        n += 1
                    limit = min(limit, n)
                d = min(d, limit)
            if d >= 1:
                attach[st] = (owner, d)
                level[owner] = min(level.get(owner, d), d)
        return attach, level

    # ------------------------------------------------------------------ run
    def run(self):
        inlined = self.inline()
        attach, level = self.groups(inlined)
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
            if st in inlined or st in attach or any(st is r for r in epilogue.values()):
                continue
            info = self.infos[st]
            members = [m for m in self.comp if attach.get(m, (None,))[0] is st]
            if st in epilogue:
                R = epilogue[st]
                (self.dot_tile if self.dot_layout(R) else self.tile)(R, st)
            elif info.is_reuse_reduction():
                (self.dot_tile if self.dot_layout(st) else self.tile)(st, None)
            elif info.is_reduction:
                self.reduction(st, level.get(st, 0), members)
            else:
                self.elementwise(st, level.get(st, 0), members)

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
            return
        vs = self.vector_split(st, axes[-1], exts[-1], dtype)
        loops = [(iv, e, False) for iv, e in zip(axes[:-1], exts[:-1])]
        if vs is not None:
            loops.append(vs)
        else:
            loops.append((axes[-1], exts[-1], False))
        self.parallel_prefix(st, loops, work, "elementwise")

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
        if info.reduce_contiguous() and self.can_vectorize(dtype) and lanes >= 2 and \
                (kext is None or kext >= lanes):
            # several vectors of partial sums: independent add chains hide the add latency
            nvec = max(1, min(self.p.unroll, (kext or BIG) // lanes))
            width = lanes * nvec
            ko, ki = st.split(k, factor=width)
            loop = None
            if work is not None and axes:
                loop = self.parallel_prefix(st, [(iv, e, False) for iv, e in
                                                 zip(axes, info.extents[-len(axes):])], work, "outputs")
            rf = self.s.rfactor(st.op.output(0), ki)
            rst = self.s[rf]
            leaves = [iv for iv in st.leaf_iter_vars if iv.kind != "reduce"]
            at = leaves[-1] if leaves else loop
            if at is not None:
                rst.compute_at(st, at)
            rst.reorder(*rst.op.reduce_axis, rst.op.axis[0])
            rst.vectorize(rst.op.axis[0])
            self.rec.add(st, "rfactor-vectorize", f"split({k.var.name}, {width}); rfactor; "
                         "vectorize the partial sums", f"the reduction axis is the contiguous one: "
                         f"{width} partial results per output ({nvec} vectors of {lanes} lanes: "
                         "independent add chains)")
            return
        if axes and self.can_vectorize(dtype):
            last = axes[-1]
            ext = info.extents[-1] if info.extents else None
            if ext is None or ext >= max(2, lanes // 2):
                width = tiling.row_vector(self.t, ext, dtype) if ext is not None else lanes
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

    # ------------------------------------------------------------------ contractions
    def dot_layout(self, R) -> bool:
        """No operand is contiguous along the output's last axis, but every operand read
        moves contiguously with the innermost reduction axis (A @ B.T, attention's Q K^T):
        vectors along the reduction, not along the outputs."""
        info = self.infos[R]
        if not self.can_vectorize(R.op.output(0).dtype) or self.lanes(R.op.output(0).dtype) < 2:
            return False
        v, k = info.axes[-1], info.raxes[-1]
        if any(ld.contiguous_in(v) for ld in info.loads):
            return False
        ext = info.rextents[-1]
        return all(ld.contiguous_in(k) for ld in info.loads if ld.uses(k)) and (ext is None or ext >= self.lanes(R.op.output(0).dtype))

    def dot_tile(self, R, T):
        """A tile of rows x cols outputs, each accumulating a vector of partial sums along the
        contiguous reduction axis (rfactor over the lanes): per step, rows + cols vector loads
        feed rows x cols FMAs; the lanes are summed once per output at the end."""
        s, info = self.s, self.infos[R]
        n = len(info.axes)
        v, r = n - 1, info.row_axis()
        dtype = R.op.output(0).dtype
        lanes = self.lanes(dtype)
        regs = self.t.vector_registers
        side = max(x for x in range(1, 9) if x * x + 2 * x + 1 <= regs and x * x <= 3 * regs // 4)
        rows, cols = side, side
        why = (f"{rows * cols} vector accumulators and {rows + cols} loaded vectors fit "
               f"{regs} vector registers")
        if self.p.tile:
            rows, cols = self.p.tile[0] or rows, self.p.tile[1] or cols
            why = "given in params"
        ext_r, ext_v = info.extents[r], info.extents[v]
        rows, cols = min(rows, ext_r or BIG), min(cols, ext_v or BIG)
        k = list(s[R].op.reduce_axis)[-1]
        ko, ki = s[R].split(k, factor=lanes)
        rf = s.rfactor(R.op.output(0), ki, factor_axis=n)   # lanes last: contiguous partial sums
        F = s[rf]
        owner = T if T is not None else R
        O = s[owner.op.output(0)]
        if T is not None:
            self.rec.add(T, "fuse-epilogue", f"'{R.op.name}' computed inside '{T.op.name}''s tile",
                         "the elementwise consumer reads the sums while they are in cache")
        ax = list(O.op.axis)
        ro, ri = O.split(ax[r], factor=rows)
        vo, vi = O.split(ax[v], factor=cols)
        others = [ax[i] for i in range(n) if i not in (r, v)]
        O.reorder(*others, ro, vo, ri, vi)
        self.rec.add(R, "dot-tile", f"split({k.var.name}, {lanes}); rfactor; tile {ax[r].var.name} x "
                     f"{ax[v].var.name} by {rows} x {cols}, each a vector of {lanes} partial sums", why)
        work = info.outputs(BIG) * info.reduce_size(BIG)
        ro_rag = ext_r is None or ext_r % rows != 0
        vo_rag = ext_v is None or ext_v % cols != 0
        loops = [(iv, info.extents[i], False) for i, iv in enumerate(ax) if i not in (r, v)]
        loops += [(ro, None if ext_r is None else -(-ext_r // rows), ro_rag),
                  (vo, None if ext_v is None else -(-ext_v // cols), vo_rag)]
        self.parallel_prefix(O, loops, work, "tiles")
        leaves = O.leaf_iter_vars
        at = leaves[leaves.index(ri) - 1]
        if T is not None:
            s[R].compute_at(O, at)
        F.compute_at(O, at)
        fa, fr = list(F.op.axis), list(F.op.reduce_axis)
        kv, sp = fa[n], fa[:n]
        F.reorder(*[sp[i] for i in range(n) if i not in (r, v)], *fr, sp[r], sp[v], kv)
        F.unroll(sp[r])
        F.unroll(sp[v])
        F.vectorize(kv)
        self.rec.add(rf.op.name, "micro-kernel", "reduction outside; rows and columns unrolled; the "
                     "lanes of the reduction vectorized", "each step: rows + cols vector loads, "
                     "rows x cols vector FMAs")

    def tile(self, R, T):
        """A register tile for contraction R; T: its elementwise consumer (epilogue) or None."""
        s, info = self.s, self.infos[R]
        n = len(info.axes)
        v, r = n - 1, info.row_axis()
        dtype = R.op.output(0).dtype
        lanes = self.lanes(dtype) if self.can_vectorize(dtype) else 1
        ext_r, ext_v = info.extents[r], info.extents[v]
        mr, mv = ext_r or BIG, ext_v or BIG
        rows, vecs = tiling.register_tile(self.t, mr, mv, dtype, whole_rows=True)
        alt = tiling.register_tile(self.t, mr, mv, dtype)
        if rows * vecs < self.t.fma_chains and alt[0] * alt[1] > rows * vecs:
            rows, vecs = alt
        why = (f"{rows * vecs} accumulators fit {self.t.vector_registers} vector registers with the "
               f"loaded vectors; >= {self.t.fma_chains} independent FMA chains "
               f"({self.t.fma_units} units x latency {self.t.fma_latency})")
        if self.p.tile:
            rows, vecs = self.p.tile[0] or rows, self.p.tile[1] or vecs
            why = f"given in params (the target's own tile: {why})"
        rows = max(1, min(rows, mr))
        nr = max(1, min(vecs * lanes, mv))
        owner = T if T is not None else R
        out = owner.op.output(0)
        if T is None:
            local = s.cache_write(R.op.output(0), "local")
            L = s[local]
            self.rec.add(R, "cache_write", "cache_write(local)", "the accumulator tile lives in "
                         "registers across the whole reduction; written out once")
        else:
            L = R
            self.rec.add(T, "fuse-epilogue", f"'{R.op.name}' computed inside '{T.op.name}''s tile",
                         "the elementwise consumer reads the accumulators straight from registers")
        O = s[out]
        ax = list(O.op.axis)
        ro, ri = O.split(ax[r], factor=rows)
        vo, vi = O.split(ax[v], factor=nr)
        others = [ax[i] for i in range(n) if i not in (r, v)]
        oexts = [info.extents[i] for i in range(n) if i not in (r, v)]
        ro_ext = None if ext_r is None else -(-ext_r // rows)
        vo_ext = None if ext_v is None else -(-ext_v // nr)
        ro_rag, vo_rag = ext_r is None or ext_r % rows != 0, ext_v is None or ext_v % nr != 0
        operand = self.pack_operand(R, r, v, nr) if self.p.pack is not False else None
        if operand is not None and self.p.pack is None and not self.pays_to_pack(R, operand, nr):
            operand = None
        if operand is not None:
            outer = [(vo, vo_ext, vo_rag), (ro, ro_ext, ro_rag)]
        else:
            outer = [(ro, ro_ext, ro_rag), (vo, vo_ext, vo_rag)]
        O.reorder(*others, *[x[0] for x in outer], ri, vi)
        if lanes > 1:
            O.vectorize(vi)
        self.rec.add(R, "register-tile", f"tile {ax[r].var.name} x {ax[v].var.name} by {rows} x {nr} "
                     f"({rows} rows x {-(-nr // lanes)} vectors of {lanes})", why)
        work = info.outputs(BIG) * info.reduce_size(BIG)
        loops = [(iv, e, False) for iv, e in zip(others, oexts)] + outer
        par = self.parallel_prefix(O, loops, work, "tiles")
        leaves = O.leaf_iter_vars
        at = leaves[leaves.index(ri) - 1]
        L.compute_at(O, at)
        if operand is not None:
            pk = s.cache_read(operand, "global", [L.op.output(0)])
            P = s[pk]
            # the panel is copied at the loop over column tiles (or the parallel loop that
            # contains it), so every row tile of that column reuses it
            pat = vo if vo in leaves else par
            P.compute_at(O, pat)
            pax = list(P.op.axis)
            self.rec.add(R, "pack", f"cache_read({operand.name}) at {pat.var.name}",
                         f"the reused operand's {nr}-wide panel is strided in '{operand.name}': copied "
                         "once per column of tiles into contiguous memory")
            self.vector_split(P, pax[-1], None, operand.dtype, unroll=False)
        la = list(L.op.axis)
        lr = list(L.op.reduce_axis)
        if lanes > 1 and nr > lanes:
            lvo, lvi = L.split(la[v], factor=lanes)
            L.reorder(*[la[i] for i in range(n) if i not in (r, v)], *lr, la[r], lvo, lvi)
            L.unroll(lvo)
        else:
            lvi = la[v]
            L.reorder(*[la[i] for i in range(n) if i not in (r, v)], *lr, la[r], lvi)
        L.unroll(la[r])
        if lanes > 1 and nr >= 2:
            L.vectorize(lvi)
        elif nr <= 16:
            L.unroll(lvi)
        self.rec.add(L, "micro-kernel", "reduction loops outside the tile; rows and vectors "
                     "unrolled, lanes vectorized", "each reduction step: load the vectors, "
                     "broadcast one value per row, one FMA per accumulator")

    def pack_operand(self, R, r, v, nr):
        """The operand loaded as vectors and reused across rows whose panel is strided: its
        last index moves with the vector axis, it does not use the row axis, and its rows are
        longer than the tile."""
        info = self.infos[R]
        row, vec = info.axes[r], info.axes[v]
        for ld in info.loads:
            if ld.uses(row) or not ld.contiguous_in(vec):
                continue
            if len(ld.pos_vars) < 2 or not any(ld.uses(k) for k in info.raxes):
                continue
            last = _static(ld.tensor.shape[-1])
            if last is None or last > nr:
                if len(info.loads_of(ld.tensor)) == 1:
                    return ld.tensor
        return None

    def pays_to_pack(self, R, operand, nr):
        """A copy pays when the panel (reduction steps x tile width) outgrows the L1 cache:
        then the strided rows keep missing; a small panel stays cached as it is."""
        info = self.infos[R]
        (ld,) = info.loads_of(operand)
        steps = 1
        for k, e in zip(info.raxes, info.rextents):
            if ld.uses(k):
                steps *= BIG if e is None else e
        from .. import dtype as dt
        return steps * nr * dt.bits(operand.dtype) // 8 > self.t.cache_bytes(1) // 2


def _static(e):
    from .analysis import const_extent
    return e if isinstance(e, int) else const_extent(e)


def _prod(xs):
    p = 1
    for x in xs:
        if x is None:
            return None
        p *= x
    return p


def schedule_cpu(s, target, rec, params):
    CPUScheduler(s, target, rec, params).run()
