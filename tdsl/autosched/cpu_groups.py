"""CPU plan: which stages are computed inside another stage's loops, decided after the
inline phase (`cpu.CPUContext.plan`), and how they are attached once their owner is
scheduled.

- A stage that is read only by one loop nest, at indices that are that nest's own leading
  loop variables, is computed at that loop (softmax's row max and row sum inside the
  output's row loop): its data is produced and consumed while in cache.
- A contraction whose one reader is elementwise and reads it at its own indices (a bias
  and activation) is computed inside that reader's register tile: the epilogue fusion."""
from __future__ import annotations


def compute_at_groups(ctx):
    """(attach, level): attach[st] = (owner, lvl) when st is computed inside owner's first
    `lvl` loops; level[owner]: the fewest loops any of its members needs."""
    attach, level = {}, {}
    for st in reversed(ctx.comp):
        if st in ctx.inlined or st.is_output or ctx.infos[st].is_reuse_reduction() or \
                st in ctx.stencil:
            continue
        readers = ctx.eff_readers(st)
        if any(c in ctx.stencil for c in readers):
            continue
        owners = {attach[c][0] if c in attach else c for c in readers}
        if len(owners) != 1:
            continue      # read by several loop nests: root
        (owner,) = owners
        if ctx.infos[owner].is_reuse_reduction():
            continue
        d = len(st.op.axis)
        for c in readers:
            limit = attach[c][1] if c in attach else len(ctx.infos[c].axes)
            d = min(d, read_prefix(ctx, st, c, limit, unit=ctx.infos[st].is_reduction))
        if d >= 1:
            attach[st] = (owner, d)
            level[owner] = min(level.get(owner, d), d)
    return attach, level


def epilogues(ctx):
    """{T: R}: contraction R computed inside the tile of T, its one elementwise reader."""
    epilogue = {}
    for st in ctx.comp:
        if st in ctx.inlined or not ctx.infos[st].is_reuse_reduction() or st.is_output:
            continue
        readers = ctx.eff_readers(st)
        if len(readers) == 1:
            T = readers[0]
            ti = ctx.infos[T]
            if not ti.is_reduction and T not in ctx.attach and T not in ctx.level and \
                    T not in epilogue and len(ti.axes) == len(ctx.infos[st].axes) and \
                    identity_reads(ctx, st, T):
                epilogue[T] = st
    return epilogue


def read_prefix(ctx, st, c, limit, unit=False) -> int:
    """How many of c's leading loop variables (at most `limit`) index every read of st
    on the way to c, itself or through inlined stages (`1 / sum[i]` inlined into c):
    st computed inside that many of c's loops has what each iteration reads. With `unit`,
    index 0 on an axis of extent 1 counts as that axis: a broadcast reads a size-1 axis
    at 0 (a reduction's keepdims row sum read by a (1, S, D) epilogue)."""
    def prefix(reader, producer, n):
        info = ctx.infos[reader]
        for ld in info.loads_of(producer.op.output(0)):
            k = 0
            while k < min(n, len(ld.indices), len(info.axes)) and \
                    (ld.index_is_axis(k, info.axes[k]) or unit and info.extents[k] == 1 and is_zero(ld.indices[k])):
                k += 1
            n = min(n, k)
        return n
    n = prefix(c, st, limit) if c in ctx.readers[st] else limit
    for m in ctx.readers[st]:
        if m in ctx.inlined and c in ctx.eff_readers(m):
            n = min(n, prefix(m, st, read_prefix(ctx, m, c, n, unit)))
    return n


def is_zero(e) -> bool:
    return getattr(e, "value", None) == 0


def identity_reads(ctx, st, T) -> bool:
    """Every read of st on the way to T (through inlined stages) is at the reader's own
    loop variables, in order: T's element (i, j) needs exactly st's element (i, j)."""
    for c in ctx.readers[st]:
        ci = ctx.infos[c]
        if len(ci.axes) != len(ctx.infos[st].axes) or ci.is_reduction:
            return False
        for ld in ci.loads_of(st.op.output(0)):
            if not all(ld.index_is_axis(n, ci.axes[n]) for n in range(len(ci.axes))):
                return False
        if c is not T and not (c in ctx.inlined and identity_reads(ctx, c, T)):
            return False
    return True


def members_of(ctx, st):
    """The stages computed inside `st`'s loops, producers first."""
    return [m for m in ctx.comp if ctx.attach.get(m, (None,))[0] is st]


def attach_members(ctx, st, loop, members, lvl):
    for m in members:
        ms = ctx.sched[m]
        ms.compute_at(st, loop)
        ctx.rec.add(m, "compute_at", f"compute_at({st.op.name}, {loop.var.name})",
                    f"read by '{st.op.name}' at its own first {lvl} loop variable(s): produced "
                    "and consumed while in cache")
        inner(ctx, m, lvl)


def inner(ctx, m, lvl):
    """The loops of a stage computed inside another's first `lvl` loops."""
    info = ctx.infos[m]
    axes = list(m.op.axis)
    if info.is_reduction:
        ctx.reduce_inner(m, axes[lvl:], None)
    elif len(axes) > lvl:
        ctx.vector_split(m, axes[-1], info.extents[-1], m.op.output(0).dtype)


__all__ = ["compute_at_groups", "epilogues", "read_prefix", "is_zero", "identity_reads", "members_of",
           "attach_members", "inner"]
