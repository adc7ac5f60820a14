"""The auto-scheduler's rule for stages with update definitions (`tdsl.update`), first in
`CPU_RULES` and `GPU_RULES`: it takes the pure stage of a chain and schedules it and every
update, as Halide's autoschedulers treat a Func's definitions.

- The pure definition: the outer axis in parallel and the contiguous one vectorized (on
  the GPU, one element per thread).
- An update with pure variables: they carry the parallelism (always legal). When the
  innermost pure variable is the contiguous dimension (a recursive filter down the
  columns), its outer part is the parallel loop, outside the reduction, and its inner part
  is vectorized inside it; otherwise the outer pure variable runs in parallel around the
  serial reduction (along the rows). On the GPU the pure variables are the grid.
- An update without pure variables (a histogram, a scatter): race-free along its reduction
  variable, the reduction runs in parallel as it is; an associative one with a long
  reduction is split into one partial result per core by `rfactor` on the CPU (private
  partial histograms, then a merge), and made `atomic()` on the GPU (one thread per
  element of the reduction). Anything else stays serial: its order is its meaning.

Chains are not inlined (the inline phase skips them), and stay at root but in one case: a
chain read by one stage only at that stage's own first index, which every update writes
at a pure variable, is computed at the reader's outer loop (apps/bilateral_grid's
histogram per row of the first blur: each row built in cache and consumed). Attached
anywhere else, a chain would recompute its non-pure dimensions whole at every iteration.
"""
from __future__ import annotations

from ..ir import expr as E
from ..ir.visitor import walk
from ..schedule.updates import update_chains
from ..te.compute import thread_axis
from .cpu_base import PAR_MIN_WORK
from .rule import Rule

GPU_THREADS = 256
RFACTOR_MIN = 4096      # reduction iterations below which a serial update is cheaper


def _extent(e):
    return e.value if isinstance(e, E.IntImm) else None


def _scatters(op):
    """Whether the update writes at an index read from data."""
    found = []
    for e in op.index:
        walk(e, lambda n: found.append(n) if isinstance(n, E.ProducerLoad) else None)
    return bool(found)


class Updates(Rule):
    name = "update"

    def applies(self, ctx, st):
        return bool(update_chains(ctx.sched).get(st))

    def apply(self, ctx, st):
        gpu = ctx.family == "gpu"
        nested = not gpu and self._attach_cpu(ctx, st)
        (self._pure_gpu if gpu else self._pure_cpu)(ctx, st, *([nested] if not gpu else []))
        for u in update_chains(ctx.sched)[st]:
            if u.op.axis:
                (self._pure_vars_gpu if gpu else self._pure_vars_cpu)(ctx, u, *([nested] if not gpu else []))
            else:
                (self._reduction_gpu if gpu else self._reduction_cpu)(ctx, st, u)

    # ------------------------------------------------------------------ CPU
    def _attach_cpu(self, ctx, st):
        """Computes the chain at its one reader's outer loop (its parallel one, when the
        reader is large enough for threads) when that reader reads it only at its own
        first index and every update writes that dimension at a pure variable
        (apps/bilateral_grid's histogram per row of the first blur): each row is built in
        cache and consumed, with no pass over the whole buffer to clear it and none to
        read it back. Returns whether it did."""
        ups = update_chains(ctx.sched)[st]
        if any(not u.op.axis or 0 not in u.op.pure_dims for u in ups) or len(st.op.axis) < 2:
            return False
        own = {st, *ups}
        readers = [c for c in ctx.sched.stages if c not in own and own & set(ctx.sched.producers(c))]
        if len(readers) != 1 or readers[0] not in ctx.infos or readers[0] in ctx.inlined:
            return False
        r = readers[0]
        lead = r.op.axis[0] if r.op.axis else None
        leaves = r.leaf_iter_vars
        if not leaves or leaves[0] is not lead:
            return False
        t = ups[-1].op.output(0)
        loads = ctx.infos[r].loads_of(t)
        if not loads or any(not (isinstance(ld.indices[0], E.Var) and ld.indices[0] is lead.var)
                            for ld in loads):
            return False
        st.compute_at(r, lead)
        self.note(ctx, st, f"compute_at({r.op.name}, {lead.var.name})", f"read by "
                  f"'{r.op.name}' only at its own {lead.var.name}, which every update writes at "
                  "a pure variable: each row computed where it is read, in cache")
        return True

    def _vector(self, ctx, stage, iv, ext):
        lanes = ctx.target.vector_lanes(stage.op.dtype)
        if ext is not None and ext >= lanes:
            o, i = stage.split(iv, factor=lanes)
            stage.vectorize(i)
            return o
        return iv

    def _pure_cpu(self, ctx, st, nested=False):
        axes = list(st.op.axis)
        inner = self._vector(ctx, st, axes[-1], _extent(axes[-1].dom.extent))
        outer = axes[0] if len(axes) > 1 else inner
        if nested:
            return
        size = 1
        for iv in axes:
            size = size * (_extent(iv.dom.extent) or PAR_MIN_WORK)
        if size >= PAR_MIN_WORK and ctx.params.parallel:
            st.parallel(outer)
            self.note(ctx, st, f"parallel({outer.var.name}), vectorize", "the pure "
                      "definition: every element independent")
        else:
            self.note(ctx, st, "vectorize", "the pure definition: too small for threads")

    def _pure_vars_cpu(self, ctx, u, nested=False):
        op = u.op
        last = len(op.shape) - 1
        pure = list(op.axis)
        red = [iv for iv in u.leaf_iter_vars if iv.kind == "reduce"]
        if op.pure_dims[-1] == last and red and _scatters(op):
            self._scatter_rows_cpu(ctx, u, pure, red, nested)
            return
        if nested:
            self.note(ctx, u, "serial", "computed inside its reader's parallel loop")
            return
        if op.pure_dims[-1] == last and red:
            x = pure[-1]
            lanes = ctx.target.vector_lanes(op.dtype)
            ext = _extent(x.dom.extent)
            if ext is not None and ext >= 2 * lanes:
                xo, xi = u.split(x, factor=lanes)
                u.reorder(*pure[:-1], xo, *red, xi)
                u.vectorize(xi)
                u.parallel(pure[0] if len(pure) > 1 else xo)
                self.note(ctx, u, f"reorder(.., {red[0].var.name}, {x.var.name}), vectorize, "
                          "parallel", "pure variable along the contiguous dimension: vectors "
                          "of it advance the reduction together")
                return
        u.parallel(pure[0])
        self.note(ctx, u, f"parallel({pure[0].var.name})", "pure variables are independent; "
                  "the reduction runs in order inside each")

    def _scatter_rows_cpu(self, ctx, u, pure, red, nested=False):
        # a write at an index read from data (a scatter of rows, an embedding's adjoint):
        # each iteration touches a row anywhere in the buffer, so the row stays whole
        # inside the reduction (one contiguous run of vectors per index, not one cache line
        # per index and per column block); the parallelism is an outer pure variable, or
        # the row cut into one part per core
        x = pure[-1]
        lanes = ctx.target.vector_lanes(u.op.dtype)
        ext = _extent(x.dom.extent)
        cores = ctx.target.num_cores if ctx.params.parallel and not nested else 1
        par = pure[0] if len(pure) > 1 and not nested else None
        if par is None and cores > 1 and ext is not None and ext >= 2 * cores * lanes:
            par, x = u.split(x, nparts=cores)
        u.reorder(*([par] if par is not None else []), *[p for p in pure[:-1] if p is not par],
                  *red, x)
        if ext is not None and ext >= lanes:
            _, xi = u.split(x, factor=lanes)
            u.vectorize(xi)
        if par is not None:
            u.parallel(par)
        self.note(ctx, u, f"reorder(.., {red[0].var.name}, {x.var.name}), vectorize"
                  + (", parallel" if par is not None else ""), "a write at an index read from "
                  "data: whole rows inside the reduction, " + (
                      "inside its reader's parallel loop" if nested else "threads over the pure variables"))

    def _reduction_cpu(self, ctx, base, u):
        op = u.op
        r = op.reduce_axis[-1]
        n = _extent(r.dom.extent)
        if all(op.race_free(x) for x in op.reduce_axis):
            r = op.reduce_axis[0]
            u.parallel(r)
            self.note(ctx, u, f"parallel({r.var.name})", "race-free: each iteration writes "
                      "its own element")
            return
        cores = ctx.target.num_cores
        if op.combine_op is None or n is None or n < RFACTOR_MIN or cores < 2 \
                or not ctx.params.parallel:
            self.note(ctx, u, "serial", "the update depends on its order" if op.combine_op is
                      None else "too short to split")
            return
        # the outermost reduction loop: each partial result's loop then sits outside the
        # others (one fork-join, not one per iteration of an outer reduction loop)
        ro, _ = u.split(op.reduce_axis[0], nparts=cores)
        rf = ctx.sched.rfactor(base.op.output(0), ro)
        rs = ctx.sched[rf]
        rs.parallel(rs.op.axis[0])
        rs.update(0).parallel(rs.update(0).op.axis[-1])
        self.note(ctx, u, f"rfactor({ro.var.name}) into {cores} partial results",
                  f"associative '{op.combine_op}' update: one private copy per core, merged")

    # ------------------------------------------------------------------ GPU
    def _bind(self, stage, iv, ext):
        bx, tx = stage.split(iv, factor=min(GPU_THREADS, ext) if ext else GPU_THREADS)
        stage.bind(bx, thread_axis("blockIdx.x"))
        stage.bind(tx, thread_axis("threadIdx.x"))

    def _pure_gpu(self, ctx, st):
        axes = list(st.op.axis)
        f = st.fuse(*axes) if len(axes) > 1 else axes[0]
        self._bind(st, f, None)
        self.note(ctx, st, "bind", "the pure definition: one element per thread")

    def _pure_vars_gpu(self, ctx, u):
        pure = list(u.op.axis)
        red = [iv for iv in u.leaf_iter_vars if iv.kind == "reduce"]
        f = pure[0] if len(pure) == 1 else u.fuse(*pure)
        u.reorder(f, *red)
        self._bind(u, f, None)
        self.note(ctx, u, "bind pure variables", "one thread per point of the pure variables; "
                  "the reduction runs in order in each")

    def _reduction_gpu(self, ctx, base, u):
        op = u.op
        r = op.reduce_axis[-1]
        concurrent = all(op.race_free(x) for x in op.reduce_axis)
        if not concurrent and op.combine_op is not None:
            u.atomic()
            concurrent = True
        if concurrent and len(op.reduce_axis) == 1:
            self._bind(u, r, None)
            self.note(ctx, u, "atomic(), bind" if u.atomics else "bind", "one thread per "
                      "iteration of the reduction")
            return
        # the outermost reduction loop: every loop of the update then runs in the one thread
        one, _ = u.split(op.reduce_axis[0], nparts=1)
        u.bind(one, thread_axis("blockIdx.x"))
        self.note(ctx, u, "one thread", "the update depends on its order")


UPDATES = Updates()

__all__ = ["Updates", "UPDATES"]
