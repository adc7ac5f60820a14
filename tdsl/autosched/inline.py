"""The inline phase's rules, which every target family uses: an elementwise stage is
inlined into its readers (no buffer, no extra pass over memory), except

- the operands of contractions, materialized once: the tile's inner loop then reads plain
  memory (on a GPU, stages it through shared memory) instead of recomputing per use;
- on CPUs, expensive stages read more than once (an exp read by a row sum and a division
  is computed once);
- a stage that is not elementwise in its readers' terms: one read at an index read from
  data (a lookup table, a grid sliced at each pixel's intensity) would be recomputed, with
  all it inlines, at every read."""
from __future__ import annotations

from ..ir import expr as E
from ..ir.visitor import walk
from .rule import INLINE_PHASE, Rule


def _reads_data(e):
    found = []
    walk(e, lambda n: found.append(n) if isinstance(n, E.ProducerLoad) else None)
    return bool(found)


class Materialize(Rule):
    name = "materialize"
    phase = INLINE_PHASE

    def applies(self, ctx, st):
        return bool(ctx.contraction_readers(st)) or (ctx.family == "cpu" and self.costly(ctx, st)) \
            or self.looked_up(ctx, st)

    @staticmethod
    def looked_up(ctx, st):
        """Whether a reader reads `st` at an index read from data."""
        out = st.op.output(0)
        return any(_reads_data(i) for c in ctx.readers[st] for ld in ctx.infos[c].loads_of(out)
                   for i in ld.indices)

    @staticmethod
    def costly(ctx, st):
        readers = ctx.eff_readers(st)
        nreads = sum(len(ctx.infos[c].loads_of(st.op.output(0))) for c in ctx.readers[st])
        return ctx.infos[st].expensive and (len(readers) > 1 or nreads > 1)

    def apply(self, ctx, st):
        tiled = ctx.contraction_readers(st)
        if tiled and ctx.family == "gpu":
            self.note(ctx, st, "compute_root", "operand of a contraction: computed once, then "
                      "staged through shared memory")
        elif tiled:
            self.note(ctx, st, "compute_root", f"operand of contraction '{tiled[0].op.name}': "
                      "computed once, not per use in the register tile")
        elif self.looked_up(ctx, st):
            self.note(ctx, st, "kept", "read at an index read from data: computed once, "
                      "looked up")
        else:
            nreads = sum(len(ctx.infos[c].loads_of(st.op.output(0))) for c in ctx.readers[st])
            self.note(ctx, st, "kept", f"calls a costly intrinsic and is read {nreads} times: "
                      "computed once")


class Inline(Rule):
    name = "inline"
    phase = INLINE_PHASE

    def apply(self, ctx, st):
        st.compute_inline()
        ctx.inlined.add(st)
        self.note(ctx, st, "compute_inline", "elementwise: computed by the thread that reads it"
                  if ctx.family == "gpu" else "elementwise: computed where it is read")


MATERIALIZE = Materialize()
INLINE = Inline()

__all__ = ["Materialize", "Inline", "MATERIALIZE", "INLINE"]
