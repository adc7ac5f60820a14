"""Bound inference as message passing over a stage's split/fuse relations.

- `pass_down(stage, root_ranges)`: ranges of every IterVar from the ranges of the roots.
- `pass_up_index(stage, ranges, leaf_values)`: the value of every IterVar (roots included)
  from the values of the leaf loops.
- `pass_up_conditions(stage, ranges, values)`: guards that keep a non-divisible split inside
  its parent's range.
- `infer_bounds(schedule)`: the ranges of every stage, consumers first; a stage attached
  with compute_at gets the region its consumer reads inside the attach loop.

GPU scopes: a stage in "shared" scope is one buffer for the whole thread block, so its
region is relaxed over the threadIdx-bound loops around its attach point (the block's
threads fill it together); "local" and "global" stages keep the per-thread region.

Leaf loops of derived IterVars start at 0; a root IterVar that is never split keeps its own
minimum, so `for i in range(io*8, io*8 + 8)` reads naturally in an attached stage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from .. import arith
from ..errors import LoweringError
from ..ir import expr as E
from ..ir.expr import Range
from ..ir.visitor import Mutator, free_vars, substitute, walk
from ..te.scan import scan_roles
from ..te.tensor import IterVar, PlaceholderOp
from ..te.update import UpdateOp
from .relations import Fuse, Split
from .updates import update_chains


def _const(e):
    return e.value if isinstance(e, E.IntImm) else None


def _thread_tag(stage, iv) -> bool:
    attr = stage.iter_var_attrs.get(iv)
    return attr is not None and attr.thread is not None and \
        attr.thread.thread_tag.startswith("threadIdx")


def pass_down(stage, root_ranges: Dict[IterVar, Range]) -> Dict[IterVar, Range]:
    rng = dict(root_ranges)
    zero = E.const(0)
    for rel in stage.relations:
        if isinstance(rel, Split):
            ext = rng[rel.parent].extent
            if rel.factor is not None:
                inner = rel.factor
                c = _const(ext)
                # a factor larger than the extent shrinks to it, except on a loop bound to
                # a GPU thread tag: there the factor is the block size the schedule asked
                # for, which the other loops bound to that tag (cooperative fetches, other
                # stages) match; the split's guard masks the extra threads
                if c is not None and c < inner and not _thread_tag(stage, rel.inner):
                    inner = max(c, 1)
                inner = E.const(inner)
                outer = arith.ceil_div(ext, inner)
            else:
                outer = E.const(rel.nparts)
                inner = arith.ceil_div(ext, outer)
            rng[rel.outer] = Range(zero, arith.simplify(outer))
            rng[rel.inner] = Range(zero, arith.simplify(inner))
        elif isinstance(rel, Fuse):
            rng[rel.fused] = Range(zero, arith.simplify(rng[rel.outer].extent * rng[rel.inner].extent))
    return rng


def _covers(ranges, rel) -> bool:
    """Whether split `rel`'s tiles cover its parent exactly (no tail)."""
    p, step = ranges[rel.parent], ranges[rel.inner].extent
    return arith.can_prove(E.EQ(ranges[rel.outer].extent * step, p.extent)) or arith.is_divisible(p.extent, step)


def shifts(rel, ranges) -> bool:
    """Whether split `rel` shifts its last tile inwards here: asked to, with a tail, and
    over the whole of a root axis (the extent whose least value the code may assume: a
    stage attached where its readers need a part of the axis is guarded instead, as that
    part may be shorter than a tile)."""
    if not rel.shift or _covers(ranges, rel):
        return False
    dom = rel.parent.dom
    return dom is not None and arith.equal(ranges[rel.parent].extent, dom.extent) \
        and E.is_const_int(ranges[rel.parent].min, 0) and E.is_const_int(dom.min, 0)


def pass_up_index(stage, ranges, leaf_values) -> Dict[IterVar, E.Expr]:
    vals = dict(leaf_values)
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            p, step = ranges[rel.parent], ranges[rel.inner].extent
            start = vals[rel.outer] * step
            if shifts(rel, ranges):
                # at 0 or after: what the tile's bounds can prove without knowing that
                # the extent is a tile's worth (a stage computed inside the tile then
                # needs no guard against reading before the start)
                start = E.maximum(E.minimum(start, p.extent - step), E.const(0, start.dtype))
            vals[rel.parent] = p.min + start + vals[rel.inner]
        elif isinstance(rel, Fuse):
            ext = ranges[rel.inner].extent
            vals[rel.outer] = ranges[rel.outer].min + vals[rel.fused] // ext
            vals[rel.inner] = ranges[rel.inner].min + vals[rel.fused] % ext
    return vals


def pass_up_conditions(stage, ranges, vals) -> List[Tuple[E.Expr, bool]]:
    """(condition, is_reduction) for every split that may overshoot its parent."""
    conds = []
    for rel in stage.relations:
        if not isinstance(rel, Split):
            continue
        p = ranges[rel.parent]
        covered = ranges[rel.outer].extent * ranges[rel.inner].extent
        if arith.can_prove(E.EQ(covered, p.extent)) or arith.is_divisible(p.extent, ranges[rel.inner].extent) \
                and rel.factor is not None or shifts(rel, ranges):
            continue
        conds.append((E.likely(vals[rel.parent] < p.min + p.extent), rel.parent.kind == "reduce"))
    return conds


def size_facts(sched, bounds, params) -> Dict[E.Var, Range]:
    """{size variable: its range} for the sizes of the buffers in `params`: at least 0,
    and at least a tile where a split shifts its last tile inwards (the code assumes it)."""
    out = {}
    for p in params:
        for d in getattr(p, "shape", ()):
            if isinstance(d, E.Var):
                out[d] = Range(E.const(0), E.const(2**31 - 1))
    for st in sched.stages:
        for rel in st.relations:
            d = bounds[st].ranges[rel.parent].extent if isinstance(rel, Split) and shifts(rel, bounds[st].ranges) else None
            if d is None:
                continue
            v, least = (d, rel.factor) if isinstance(d, E.Var) else _least_value(d, rel.factor)
            if v in out:
                least = max(least, out[v].min.value)
                out[v] = Range(E.const(least), E.const(2**31 - 1 - least))
    return out


def _least_value(d, at_least):
    """(v, L) where extent `d` is an expression of one size variable v (a strided conv's
    output width, (signal + 3) // 4) that is at least `at_least` exactly where v >= L
    (both ways proven: the caller routes the sizes where d is less elsewhere, so the code
    may assume v >= L), else (None, 0)."""
    vs = list(free_vars(d))
    if len(vs) != 1:
        return None, 0
    v, big = vs[0], 2**31 - 1

    def holds(lo):
        return arith.can_prove(E.GE(d, E.const(at_least, d.dtype)), {v: Range(E.const(lo), E.const(big - lo))})
    hi = at_least
    while not holds(hi):
        hi *= 2
        if hi > 1 << 24:
            return None, 0
    lo = 0      # holds(hi); least such hi by bisection: holds is monotone in its bound
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    if hi > 0 and not arith.can_prove(E.LT(d, E.const(at_least, d.dtype)), {v: Range(E.const(0), E.const(hi))}):
        return None, 0
    return v, hi


def leaf_values(stage, ranges) -> Dict[IterVar, E.Expr]:
    """Leaf loops run from 0; a root axis with a non-zero minimum is offset."""
    return {iv: iv.var if E.is_const_int(ranges[iv].min, 0) else ranges[iv].min + iv.var
            for iv in stage.leaf_iter_vars}


def loop_range(ranges, iv) -> Range:
    """The range of leaf iv's loop variable (its loop starts at 0)."""
    return Range(E.const(0), ranges[iv].extent)


# --------------------------------------------------------------------------------------
# the effective body of a stage (inlined producers expanded)


class InlineExpander(Mutator):
    def __init__(self, sched):
        self.sched = sched

    def visit_ProducerLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        st = self.sched.stage_map[e.tensor.op]
        if st.attach_type == "inline":
            op = st.op
            body = op.bodies[e.tensor.value_index]
            body = substitute(body, {iv.var: i for iv, i in zip(op.axis, idx)})
            return self.visit(body)
        return E.ProducerLoad(e.tensor, idx)


def effective_bodies(sched, stage, cache) -> tuple:
    """The bodies of a stage's outputs with inlined producers expanded (cached)."""
    bodies = cache.get(stage)
    if bodies is None:
        expand = InlineExpander(sched)
        src = stage.op.exprs if isinstance(stage.op, UpdateOp) else stage.op.bodies
        bodies = cache[stage] = tuple(expand.visit(b) for b in src)
    return bodies


def reads_of(bodies, sched, target) -> List[Tuple[E.Expr, ...]]:
    """The index tuples at which `bodies` read any output of stage `target`."""
    out = []

    def f(n):
        if isinstance(n, E.ProducerLoad) and sched.stage_map[n.tensor.op] is target:
            out.append(n.indices)
    for b in bodies:
        walk(b, f)
    return out


# --------------------------------------------------------------------------------------


@dataclass
class StageBound:
    ranges: Dict[IterVar, Range]     # every IterVar of the stage
    region_min: Tuple[E.Expr, ...]   # offset of the stage's buffer (0 at root)
    alloc_shape: Tuple[E.Expr, ...]  # shape of the stage's buffer


def descendants(stage, iv):
    """IterVars derived from `iv` through splits and fuses (itself included)."""
    out = [iv]
    for rel in stage.relations:
        srcs = [rel.parent] if isinstance(rel, Split) else [rel.outer, rel.inner]
        if any(x in out for x in srcs):
            out += [rel.outer, rel.inner] if isinstance(rel, Split) else [rel.fused]
    return out


def attach_leaf(stage) -> IterVar:
    """The loop of the attach stage where `stage` goes. An attach axis split or fused after
    compute_at means "for each value of it": the innermost leaf derived from it."""
    parent, iv = stage.attach_stage, stage.attach_ivar
    leaves = parent.leaf_iter_vars
    if iv in leaves:
        return iv
    derived = [x for x in descendants(parent, iv) if x in leaves]
    if not derived:
        raise LoweringError(f"compute_at: stage '{stage.name}': the loop '{iv.var.name}' of "
                            f"'{parent.name}' no longer exists")
    return max(derived, key=leaves.index)


def _full_ranges(op):
    return {iv: iv.dom for iv in list(op.axis) + list(op.reduce_axis)}


def root_bound(stage, step=None) -> StageBound:
    """The bound of a stage computed whole, into a buffer of its own shape; a scan's update
    (`step`: the scan's step variable) computes one row per step."""
    op = stage.op
    ranges = _full_ranges(op)
    if step is not None:
        ranges[op.axis[0]] = Range(step, E.const(1))
    return StageBound(pass_down(stage, ranges), tuple(E.const(0) for _ in op.shape), op.shape)


def infer_bounds(sched) -> Dict[object, StageBound]:
    result: Dict[object, StageBound] = {}
    bodies = {}
    roles = scan_roles([st.op for st in sched.stages])
    chains = update_chains(sched)
    owner = {u: base for base, ups in chains.items() for u in ups}
    for stage in reversed(sched.stages):
        op = stage.op
        if stage in result:
            continue
        base = owner.get(stage, stage)
        if base in chains and base.attach_type != "inline":
            # the last update is met first (consumers first): the whole chain at once
            result.update(chain_bounds(sched, base, chains[base], result, bodies))
            continue
        if isinstance(op, PlaceholderOp) or stage.attach_type == "inline":
            continue
        if stage.attach_type == "root":
            role = roles.get(op)
            step = role[0].scan_axis.var if role is not None and role[2] == "update" else None
            result[stage] = root_bound(stage, step)
            continue
        result[stage] = attached_bound(sched, stage, result, bodies)
    return result


def attached_bound(sched, stage, result, bodies, target=None, full_dims=()) -> StageBound:
    """The bound of `stage`, attached with compute_at: the region its readers need inside
    the attach loop. `target` is the stage whose reads count (default `stage`: a chain of
    updates is read through its last update); along `full_dims` the whole extent."""
    target = stage if target is None else target
    op = stage.op
    parent = stage.attach_stage
    if parent.attach_type == "inline":
        raise LoweringError(f"compute_at: stage '{stage.name}' is attached to stage "
                            f"'{parent.name}', which is inlined")
    readers = [s for s in sched.stages if s is not stage and not isinstance(s.op, PlaceholderOp)
               and s.attach_type != "inline" and reads_of(effective_bodies(sched, s, bodies), sched, target)]
    if not readers:
        raise LoweringError(f"compute_at: stage '{parent.name}' does not read stage '{stage.name}'")
    pb = result[parent]
    leaves = parent.leaf_iter_vars
    a = leaves.index(attach_leaf(stage))
    # Everything inside the attach loop varies; the loops around it are fixed.
    inner = {iv.var: loop_range(pb.ranges, iv) for iv in leaves[a + 1:]}
    if stage.scope == "shared":
        inner.update(thread_loops_around(stage, result))
    for r in readers:
        if r is not parent and not _inside(r, parent, a, result, inner):
            raise LoweringError(
                f"compute_at: stage '{stage.name}' is attached inside '{parent.name}' but is "
                f"also read by '{r.name}', which runs outside that loop; compute it at root "
                "or attach it to a loop that encloses all its readers")
        if r is not parent:
            _add_reader_loops(r, result, inner)
    outer = {iv.var: loop_range(pb.ranges, iv) for iv in leaves[:a + 1]}
    outer.update(enclosing_ranges(sched, parent, result))
    los, his = None, None
    for r in readers:
        rb = result[r]
        vals = pass_up_index(r, rb.ranges, leaf_values(r, rb.ranges))
        root_map = {iv.var: vals[iv] for iv in list(r.op.axis) + list(r.op.reduce_axis)}
        for idx in reads_of(effective_bodies(sched, r, bodies), sched, target):
            bs = [arith.bound(substitute(i, root_map), inner) for i in idx]
            if any(lo is None or hi is None for lo, hi in bs):
                raise LoweringError(f"compute_at: cannot bound the region of '{stage.name}' "
                                    f"read by '{r.name}' at {list(idx)}")
            if los is None:
                los, his = [b[0] for b in bs], [b[1] for b in bs]
            else:
                los = [arith.simplify(E.minimum(x, b[0])) for x, b in zip(los, bs)]
                his = [arith.simplify(E.maximum(x, b[1])) for x, b in zip(his, bs)]
    exts = [arith.simplify(h - l + 1) for l, h in zip(los, his)]
    if not all(isinstance(x, E.IntImm) for x in exts):
        exts = _offset_extents(sched, target, readers, result, bodies, inner, exts)
    for d in _shifted_axes(stage):
        los[d], exts[d] = _within_domain(op.axis[d].dom, los[d], exts[d])
    alloc = []
    for ext in exts:
        if not isinstance(ext, E.IntImm):
            ext = arith.bound(ext, outer)[1]
        alloc.append(ext)
    for d in full_dims:
        los[d], exts[d], alloc[d] = E.const(0), E.convert(op.shape[d]), E.convert(op.shape[d])
    root = {iv: Range(l, x) for iv, l, x in zip(op.axis, los, exts)}
    root.update({iv: iv.dom for iv in op.reduce_axis})
    return StageBound(pass_down(stage, root), tuple(los), tuple(alloc))


def _shifted_axes(stage):
    """The root axes of `stage` that a split asks to shift its last tile inwards."""
    roots = list(stage.op.axis)
    return [roots.index(r.parent) for r in stage.relations
            if isinstance(r, Split) and r.shift and r.parent in roots]


def _within_domain(dom, lo, ext):
    """(lo, ext) of a region along an axis its stage shifts: the axis's domain where
    the region covers it and more. Readers that split their loops with a guarded tail
    (a reduction by blocks of vectors) ask for the region rounded up to their blocks,
    past the tensor's end, where they never read. Cut to the axis, the region is one
    the split shifts over (`shifts`): no guarded copy of the tile, and no tiles
    computed past the end. Any other region is left as it is."""
    if dom is not None and arith.can_prove(E.LE(lo, dom.min)) \
            and _at_least(arith.simplify(lo + ext), dom.min + dom.extent):
        return dom.min, dom.extent
    return lo, ext


def _at_least(e, x):
    """Whether e >= x provably, a max where either side is (a shifted reader's bound
    is the max of its tiles' ends, which the prover does not take apart)."""
    if isinstance(e, E.Max):
        return _at_least(e.a, x) or _at_least(e.b, x)
    return arith.can_prove(E.GE(e, x))


def _offset_extents(sched, target, readers, result, bodies, inner, exts):
    """The region's extents where each read's index is an offset fixed in the attach
    loop plus terms of the loops inside it, the same offset in every read (a tile whose
    start is shifted inwards, max(min(t * 12, w - 12), 0) + i): the spread of the inner
    terms. The bounds of the whole indices may not cancel their offset once simplified
    (max(min(t * 12 + 11, w - 1), 11) less the start above), leaving the extent of an
    unrolled tile a run-time expression. `exts` where a read's offset differs."""
    offsets, spans = [None] * len(exts), [None] * len(exts)
    for r in readers:
        rb = result[r]
        vals = pass_up_index(r, rb.ranges, leaf_values(r, rb.ranges))
        root_map = {iv.var: vals[iv] for iv in list(r.op.axis) + list(r.op.reduce_axis)}
        for idx in reads_of(effective_bodies(sched, r, bodies), sched, target):
            for d, i in enumerate(idx):
                base, rest = _split_offset(substitute(i, root_map), inner)
                lo, hi = arith.bound(rest, inner)
                if lo is None or hi is None or offsets[d] is not None and not arith.equal(offsets[d], base):
                    return exts
                offsets[d] = base
                spans[d] = (lo, hi) if spans[d] is None else \
                    (E.minimum(spans[d][0], lo), E.maximum(spans[d][1], hi))
    out = [arith.simplify(h - lo + 1) for lo, h in spans]
    return [o if isinstance(o, E.IntImm) else x for o, x in zip(out, exts)]


def _split_offset(e, inner):
    """(offset, rest) with e == offset + rest, the offset free of the variables of
    `inner` (the sum's terms that are)."""
    if isinstance(e, (E.Add, E.Sub)):
        (ab, ar), (bb, br) = _split_offset(e.a, inner), _split_offset(e.b, inner)
        op = type(e)
        return arith.simplify(op(ab, bb)), arith.simplify(op(ar, br))
    if free_vars(e) & set(inner):
        return E.const(0, e.dtype), e
    return e, E.const(0, e.dtype)


def chain_bounds(sched, base, ups, result, bodies) -> Dict[object, StageBound]:
    """The bounds of pure stage `base` and its update stages `ups`: one region, the
    buffer's. At root, the whole tensor; attached, the region its readers need along the
    dimensions every update writes at a pure variable (Halide's rule: an update at pure
    `x` touches only `x`), the whole extent along the others."""
    if base.attach_type == "root":
        out = {base: root_bound(base)}
    else:
        pure = set(range(len(base.op.shape)))
        for u in ups:
            pure &= set(u.op.pure_dims)
        full = [d for d in range(len(base.op.shape)) if d not in pure]
        out = {base: attached_bound(sched, base, result, bodies, target=ups[-1], full_dims=full)}
    b = out[base]
    region = [b.ranges[iv] for iv in base.op.axis]
    for u in ups:
        rng = {iv: region[d] for iv, d in zip(u.op.axis, u.op.pure_dims)}
        rng.update({iv: iv.dom for iv in u.op.reduce_axis})
        out[u] = StageBound(pass_down(u, rng), b.region_min, b.alloc_shape)
    return out


def is_thread_bound(stage, iv, prefix="threadIdx") -> bool:
    """Whether leaf `iv` of `stage` is bound to a GPU thread tag starting with `prefix`."""
    attr = stage.iter_var_attrs.get(iv)
    return (attr is not None and attr.thread is not None
            and attr.thread.thread_tag.startswith(prefix))


def _loops_around(stage, result, keep):
    """{var: range} of the loops (those `keep(stage, iv)` accepts) that enclose an attached
    stage, through its whole attach chain."""
    out = {}
    while stage.attach_type == "scope":
        parent = stage.attach_stage
        leaves = parent.leaf_iter_vars
        a = leaves.index(attach_leaf(stage))
        for iv in leaves[:a + 1]:
            if keep(parent, iv):
                out[iv.var] = loop_range(result[parent].ranges, iv)
        stage = parent
    return out


def _thread_or_vthread(stage, iv):
    return is_thread_bound(stage, iv) or is_thread_bound(stage, iv, "vthread")


def thread_loops_around(stage, result):
    """The threadIdx- and vthread-bound loops around `stage`: a shared buffer covers all
    their iterations (the virtual threads of a thread share its block's memory too)."""
    return _loops_around(stage, result, _thread_or_vthread)


def _inside(reader, parent, a, result, scope):
    """Whether `reader` runs inside loop `a` of `parent`; adds the loops between them to
    `scope` (they vary across the region)."""
    s = reader
    found = {}
    while s.attach_type == "scope":
        p = s.attach_stage
        k = p.leaf_iter_vars.index(attach_leaf(s))
        if p is parent:
            if k < a:
                return False
            scope.update(found)
            return True
        found.update({iv.var: loop_range(result[p].ranges, iv) for iv in p.leaf_iter_vars[:k + 1]})
        s = p
    return False


def _add_reader_loops(reader, result, scope):
    scope.update({iv.var: loop_range(result[reader].ranges, iv) for iv in reader.leaf_iter_vars})


def enclosing_ranges(sched, stage, result):
    """Ranges of all loop variables around an attached stage (through its attach chain)."""
    return _loops_around(stage, result, lambda parent, iv: True)