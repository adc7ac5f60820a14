"""A reduction whose reduction loop is bound to threadIdx.*: each thread folds its share
into a local accumulator, the partial results meet in a shared buffer and are combined by
a tree, and one thread writes the result. `self` is the `ScheduleLowering` building the
stage's nest."""
from __future__ import annotations

from .. import arith
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from .nest import allocate_all, bound_tag, combine_into, guarded, store_values, wrap_threads


def cross_thread_reduce(self, st, leaves, p, threads, red, bufs, idx, spatial, rconds, lower,
                        srcs):
    """out[idx] = reduce over a threadIdx-bound reduction loop, through shared memory.

    Inside the spatial loops: each thread folds its serial reduction loops into a local
    accumulator and stores it to red[g*T + t] (g: the thread's group from the spatial
    threadIdx loops, t: its index on the reduction tag); then a tree over red, halving
    the active threads each step (any T: elements past T count as absent); thread 0 of
    the group writes the result. A tuple reduction has an accumulator and a shared
    buffer per element. thread_sync inserts the barriers."""
    def err(msg):
        return ScheduleError(f"bind: stage '{st.name}': {msg}")
    if len(threads) > 1:
        names = ", ".join(iv.var.name for iv in threads)
        raise err(f"only one reduction axis may be bound to a thread index, got {names}; "
                  "fuse them first")
    tiv = threads[0]
    tag = bound_tag(st, tiv)
    if not tag.startswith("threadIdx"):
        raise err(f"the reduction axis '{tiv.var.name}' is bound to {tag}; blocks cannot "
                  "combine partial results, bind it to a threadIdx tag (or rfactor the "
                  "reduction and bind the factored stage's spatial axis)")
    spatial_in = [iv for iv in leaves[p:] if iv.kind != "reduce"]
    if spatial_in:
        raise err(f"the spatial axis '{spatial_in[0].var.name}' is inside the reduction "
                  "loops of a cross-thread reduction; reorder it outside them")
    rng = self.bounds[st].ranges
    T = arith.simplify(rng[tiv].extent)
    if not isinstance(T, E.IntImm):
        raise err(f"the thread-bound reduction axis '{tiv.var.name}' needs a constant "
                  f"extent, got {T}")
    T = T.value
    group, G = E.const(0), 1
    for iv, ext in self._thread_groups(st, leaves[:p], tag):
        if not isinstance(ext, E.IntImm):
            raise err(f"the thread-bound axis '{iv.var.name}' needs a constant extent")
        group = group * ext.value + iv.var if G > 1 else iv.var
        G *= ext.value
    accs = [S.Buffer(f"{b.name}.acc", (E.const(1),), b.dtype, "local") for b in bufs]
    reds = [S.Buffer(f"{b.name}.red", (E.const(G * T),), b.dtype, "shared") for b in bufs]
    zero = (E.const(0),)
    comb = red.combiner
    identity = comb.identity_values([b.dtype for b in bufs])
    update = guarded(spatial, guarded(rconds, combine_into(comb, accs, zero, srcs)))
    others = [iv for iv in leaves[p:] if iv is not tiv]
    base = group * T if G > 1 else E.const(0)
    per_thread = allocate_all(accs, S.seq(
        *[S.BufferStore(a, v, zero) for a, v in zip(accs, identity)],
        self._wrap(st, others, update),
        *[S.BufferStore(r, E.BufferLoad(a, zero), (base + tiv.var,))
          for a, r in zip(accs, reds)]))
    parts = [self._wrap(st, [tiv], per_thread)]
    step = 1
    while step < T:
        step *= 2
    step //= 2

    def thread_loop(name, fn):
        v = E.Var(f"{tiv.var.name}.{name}", tiv.var.dtype)
        return S.For(v, E.const(0), E.const(T), S.ForKind.THREAD_BINDING, fn(v), tag)
    while step >= 1:
        s_ = step

        def tree(v, s_=s_):
            other = tuple(E.BufferLoad(r, (base + v + s_,)) for r in reds)
            cond = E.And(E.LT(v, E.const(s_)), E.LT(v + s_, E.const(T)))
            return S.IfThenElse(cond, combine_into(comb, reds, (base + v,), other))
        parts.append(thread_loop(f"s{s_}", tree))
        step //= 2
    result = tuple(E.BufferLoad(r, (base,)) for r in reds)
    if red.inits is not None:
        inits = tuple(E.cast(lower.visit(v), b.dtype) for v, b in zip(red.inits, bufs))
        result = comb.combine_values(inits, result)

    def write(v):
        pred, wraps = self._predicate(st, lower, at={tag: v})
        store = guarded(spatial + pred, store_values(bufs, idx, result))
        return S.IfThenElse(E.EQ(v, E.const(0)), wrap_threads(wraps, store))
    parts.append(thread_loop("w", write))
    return self._wrap(st, leaves[:p], allocate_all(reds, S.seq(*parts)))

