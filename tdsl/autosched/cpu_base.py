"""What every CPU rule shares: the sizes a rule assumes, and the helpers that fuse a parallel
prefix, pick a row loop and split a vector off an axis (each logs its reason)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .. import tiling
from .analysis import StageInfo, stage_infos

BIG = 1024                  # what a symbolic extent is assumed to be when sizing
PAR_MIN_WORK = 1 << 15      # below this (elements x reduction steps) a fork-join costs more
RFACTOR_MIN_REDUCE = 1 << 14


class CPUBase:
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
        if not self.can_vectorize(dtype) or lanes < 2 or (ext is not None and not tiling.worth_a_vector(self.t, ext, dtype)):
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

