"""A reduction whose reduction loop is bound to threadIdx.*: each thread folds its share
into a local accumulator, the partial results meet in a shared buffer and are combined by
a tree, and one thread writes the result. On CUDA (`low.warp_size`), whole warps combine
their lanes by shuffles instead and only one value per warp goes through shared memory:
one barrier, not one per tree level. `low` is the `ScheduleLowering` building the
stage's nest."""
from __future__ import annotations

from .. import arith
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.expr import WARP_SHUFFLE_DOWN
from .nest import allocate_all, bound_tag, combine_into, guarded, store_values, wrap_threads


def cross_thread_reduce(low, st, leaves, p, threads, red, bufs, idx, spatial, rconds, lower,
                        srcs):
    """out[idx] = reduce over a threadIdx-bound reduction loop, through shared memory.

    Inside the spatial loops: each thread folds its serial reduction loops into a local
    accumulator and stores it to red[g*T + t] (g: the thread's group from the spatial
    threadIdx loops, t: its index on the reduction tag); then a tree over red, halving
    the active threads each step (any T: elements past T count as absent); thread 0 of
    the group writes the result (or by warps: `_warp_reduce`). A tuple reduction has an
    accumulator and a shared buffer per element. thread_sync inserts the barriers."""
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
    rng = low.bounds[st].ranges
    T = arith.simplify(rng[tiv].extent)
    if not isinstance(T, E.IntImm):
        raise err(f"the thread-bound reduction axis '{tiv.var.name}' needs a constant "
                  f"extent, got {T}")
    T = T.value
    group, G = E.const(0), 1
    for iv, ext in low.thread_groups(st, leaves[:p], tag):
        if not isinstance(ext, E.IntImm):
            raise err(f"the thread-bound axis '{iv.var.name}' needs a constant extent")
        group = group * ext.value + iv.var if G > 1 else iv.var
        G *= ext.value
    accs = [S.Buffer(f"{b.name}.acc", (E.const(1),), b.dtype, "local") for b in bufs]
    zero = (E.const(0),)
    comb = red.combiner
    identity = comb.identity_values([b.dtype for b in bufs])
    update = guarded(spatial, guarded(rconds, combine_into(comb, accs, zero, srcs)))
    others = [iv for iv in leaves[p:] if iv is not tiv]
    fold = S.seq(*[S.BufferStore(a, v, zero) for a, v in zip(accs, identity)],
                 low.wrap(st, others, update))
    init = None
    if red.inits is not None:
        init = tuple(E.cast(lower.visit(v), b.dtype) for v, b in zip(red.inits, bufs))

    def thread_loop(name, fn):
        v = E.Var(f"{tiv.var.name}.{name}", tiv.var.dtype)
        return S.For(v, E.const(0), E.const(T), S.ForKind.THREAD_BINDING, fn(v), tag)

    def write(v, result, first):
        if init is not None:
            result = comb.combine_values(init, result)
        pred, wraps = low.predicate(st, lower, at={tag: v})
        store = guarded(spatial + pred, store_values(bufs, idx, result))
        return S.IfThenElse(first, wrap_threads(wraps, store))
    warp = _warp_size(low, tag, T, bufs)
    if warp:
        return low.wrap(st, leaves[:p], _warp_reduce(
            low, st, tiv, T, warp, group, G, accs, bufs, fold, identity, comb, thread_loop,
            write))
    base = group * T if G > 1 else E.const(0)
    reds = [S.Buffer(f"{b.name}.red", (E.const(G * T),), b.dtype, "shared") for b in bufs]
    per_thread = allocate_all(accs, S.seq(
        fold, *[S.BufferStore(r, E.BufferLoad(a, zero), (base + tiv.var,))
                for a, r in zip(accs, reds)]))
    parts = [low.wrap(st, [tiv], per_thread)]
    step = 1
    while step < T:
        step *= 2
    step //= 2
    while step >= 1:
        s_ = step

        def tree(v, s_=s_):
            other = tuple(E.BufferLoad(r, (base + v + s_,)) for r in reds)
            cond = E.And(E.LT(v, E.const(s_)), E.LT(v + s_, E.const(T)))
            return S.IfThenElse(cond, combine_into(comb, reds, (base + v,), other))
        parts.append(thread_loop(f"s{s_}", tree))
        step //= 2
    result = tuple(E.BufferLoad(r, (base,)) for r in reds)
    parts.append(thread_loop("w", lambda v: write(v, result, E.EQ(v, E.const(0)))))
    return low.wrap(st, leaves[:p], allocate_all(reds, S.seq(*parts)))


# dtypes __shfl_down_sync moves in one call
_SHUFFLED = ("float32", "float64", "int32", "int64", "uint32", "uint64")


def _warp_size(low, tag, T, bufs):
    """The warp size when the reduction may combine within warps by shuffles: a CUDA target,
    whole warps of reducing threads and dtypes a shuffle moves; else 0 (the shared-memory
    tree). Warps are whole when T is a multiple of the warp size on threadIdx.x and either
    the block is one-dimensional or every stage binds threadIdx.x to T threads (a warp then
    never spans two rows of the block)."""
    w = low.warp_size
    if not w or tag != "threadIdx.x" or T % w or any(b.dtype not in _SHUFFLED for b in bufs):
        return 0
    rows, same = False, True
    for s in low.sched.stages:
        for iv, attr in s.iter_var_attrs.items():
            t = attr.thread.thread_tag if attr.thread is not None else ""
            if t in ("threadIdx.y", "threadIdx.z"):
                rows = True
            elif t == tag and s in low.bounds:
                ext = arith.simplify(low.bounds[s].ranges[iv].extent)
                same = same and isinstance(ext, E.IntImm) and ext.value == T
    return w if same or not rows else 0


def _shuffle_tree(comb, accs, width):
    """Lane 0's accumulators become the combination over lanes [0, width) of its warp.
    The shuffled values are let-bound: every lane must execute each shuffle, and a
    combiner's select would evaluate one only on some lanes."""
    zero = (E.const(0),)
    parts, off = [], width // 2
    while off >= 1:
        ys = [E.Var(f"{a.name}.down{off}", a.dtype) for a in accs]
        body = combine_into(comb, accs, zero, ys)
        for y, a in reversed(list(zip(ys, accs))):
            down = E.Call(WARP_SHUFFLE_DOWN, (E.BufferLoad(a, zero), E.const(off, "int32")),
                          a.dtype)
            body = S.LetStmt(y, down, body)
        parts.append(body)
        off //= 2
    return parts


def _warp_reduce(low, st, tiv, T, warp, group, G, accs, bufs, per_thread, identity, comb,
                 thread_loop, write):
    """Each warp combines its lanes by shuffles; with one warp its lane 0 writes the
    result, with W warps lane 0 stores the warp's value to red[g*W + warp] and, after one
    barrier, warp 0 of the group combines the W values by shuffles: one barrier instead
    of log2(T)."""
    zero = (E.const(0),)
    t = tiv.var
    W = T // warp
    fold = _shuffle_tree(comb, accs, warp)
    result = tuple(E.BufferLoad(a, zero) for a in accs)
    if W == 1:
        body = S.seq(per_thread, *fold, write(t, result, E.EQ(t, E.const(0))))
        return low.wrap(st, [tiv], allocate_all(accs, body))
    base = group * W if G > 1 else E.const(0)
    reds = [S.Buffer(f"{b.name}.red", (E.const(G * W),), b.dtype, "shared") for b in bufs]
    lane0 = E.EQ(E.FloorMod(t, E.const(warp)), E.const(0))
    publish = S.IfThenElse(lane0, S.seq(*[
        S.BufferStore(r, v, (base + E.FloorDiv(t, E.const(warp)),)) for r, v in zip(reds, result)]))
    first = low.wrap(st, [tiv], allocate_all(accs, S.seq(per_thread, *fold, publish)))
    width = 1
    while width < W:
        width *= 2
    wacc = [S.Buffer(f"{b.name}.wacc", (E.const(1),), b.dtype, "local") for b in bufs]

    def across(v):
        body = S.seq(
            *[S.BufferStore(a, x, zero) for a, x in zip(wacc, identity)],
            S.IfThenElse(E.LT(v, E.const(W)), S.seq(*[
                S.BufferStore(a, E.BufferLoad(r, (base + v,)), zero) for a, r in zip(wacc, reds)])),
            *_shuffle_tree(comb, wacc, width),
            write(v, tuple(E.BufferLoad(a, zero) for a in wacc), E.EQ(v, E.const(0))))
        return S.IfThenElse(E.LT(v, E.const(warp)), allocate_all(wacc, body))
    return allocate_all(reds, S.seq(first, thread_loop("w", across)))
