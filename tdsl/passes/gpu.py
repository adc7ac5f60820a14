"""GPU lowering: schedule checks, storage scopes inside kernels, and the split of a lowered
function into kernels launched in order by host code.

- `check_gpu_schedule(sched, target)`: before lowering, every root stage must put its loops
  on the grid: its outermost loop bound to blockIdx.* or threadIdx.* (a serial loop outside
  the bound ones would run the whole grid once per iteration), reduction axes only on
  threadIdx (blocks cannot combine partial results).
- `gpu_storage_scope(func)`: a stage attached inside a kernel with the default "global"
  scope gets device storage it can have there: "local" (per thread) when it is allocated
  inside a threadIdx loop, "shared" (per block) when it is allocated outside them.
- `split_kernels(func)`: each top-level loop nest is one kernel; root-level intermediate
  buffers are allocated by the host. For each kernel: the launch extent of every tag (all
  loops bound to one tag in a kernel must have the same extent), the threads per block
  (at most 1024), the shared memory (at most what the largest GPU gives a block: a dialect
  may allow less, `check_shared`), and the parameters it uses.
  The result is stored in `func.attrs["kernels"]` / `func.attrs["host_buffers"]`.
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from typing import Dict, List

from .. import arith
from .. import dtype as dt
from ..errors import BuildError, ScheduleError
from ..gpu_arch import ARCHS
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, free_vars, has_barrier, walk
from ..te.extern import ExternOp
from ..te.scan import ScanOp, scan_roles
from ..te.tensor import PlaceholderOp
from ..te.update import UpdateOp

MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_BYTES = 48 * 1024       # what a block may declare statically
TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


def _bound(stage, iv):
    a = stage.iter_var_attrs.get(iv)
    return a.thread.thread_tag if a is not None and a.thread is not None else ""


def check_gpu_schedule(sched, target):
    """Raises ScheduleError for a schedule that cannot run as GPU kernels."""
    roles = scan_roles([st.op for st in sched.stages])
    for st in sched.stages:
        if isinstance(st.op, (PlaceholderOp, ScanOp)) or st.attach_type == "inline":
            continue
        if isinstance(st.op, ExternOp) and st.op.body is not None:
            _check_extern_body(st, target)
            continue
        for iv in st.leaf_iter_vars:
            tag = _bound(st, iv)
            if tag.startswith("blockIdx") and iv.kind == "reduce" \
                    and not isinstance(st.op, UpdateOp):    # checked when bound
                raise ScheduleError(
                    f"bind: stage '{st.name}': the reduction axis '{iv.var.name}' is bound to "
                    f"{tag}; blocks cannot combine partial results. Bind it to threadIdx.x, or "
                    "rfactor it and bind the new stage's spatial axis to blockIdx")
        if st.attach_type != "root" or (isinstance(st.op, UpdateOp) and
                                        sched.stage_map[st.op.base].attach_type != "root"):
            continue
        leaves = st.leaf_iter_vars
        if st.op in roles and leaves and leaves[0] is st.op.axis[0]:
            leaves = leaves[1:]     # the step (or init row): the scan runs it inside the kernel
        if not leaves:
            raise ScheduleError(f"stage '{st.name}' has no loops to bind to the GPU grid; give it "
                                "at least one axis")
        bound = [iv for iv in leaves if _bound(st, iv) not in ("", "vthread")]
        if not bound:
            outer = leaves[0].var.name
            raise ScheduleError(
                f"stage '{st.name}' is not bound to the GPU grid on target '{target}': bind its "
                f"outer loops, e.g. bx, tx = s[{st.name}].split({outer}, factor=64); "
                f"s[{st.name}].bind(bx, tdsl.thread_axis('blockIdx.x')); "
                f"s[{st.name}].bind(tx, tdsl.thread_axis('threadIdx.x')) "
                "(or compute_inline / compute_at it into a bound stage)")
        if _bound(st, leaves[0]) in ("", "vthread"):
            raise ScheduleError(
                f"stage '{st.name}': the loop '{leaves[0].var.name}' is outside the loops bound to "
                f"the GPU grid (first bound loop: '{bound[0].var.name}'); reorder so that the "
                "bound loops are outermost, or bind it too")


def _check_extern_body(st, target):
    """An ir_builder body on the GPU: each of its top-level statements is a kernel, so
    each must open with a loop bound to the grid (`ib.scope_attr(bx, "thread_extent", n)`,
    TVM's form)."""
    body = st.op.body
    for k, top in enumerate(body.stmts if isinstance(body, S.SeqStmt) else (body,)):
        if not (isinstance(top, S.For) and top.kind is S.ForKind.THREAD_BINDING
                and top.thread_tag != "vthread"):
            raise ScheduleError(
                f"extern stage '{st.name}': statement {k} of its ir_builder body does not "
                f"bind the GPU grid on target '{target}'; open it with "
                "ib.scope_attr(tdsl.thread_axis('blockIdx.x'), 'thread_extent', nblocks) "
                "(and threadIdx.x likewise), as TVM's GPU ir_builder kernels do")


# ----------------------------------------------------------------------------------------
# storage scopes inside kernels


class _Rescope(Mutator):
    def __init__(self):
        self.map = {}
        self.depth = 0      # threadIdx loops around the current node
        self.in_kernel = 0

    def visit_For(self, f):
        is_thread = f.kind is S.ForKind.THREAD_BINDING
        tdx = is_thread and f.thread_tag.startswith("threadIdx")
        self.in_kernel += is_thread
        self.depth += tdx
        try:
            body = self.visit(f.body)
        finally:
            self.in_kernel -= is_thread
            self.depth -= tdx
        return f if body is f.body else S.For(f.var, f.min, f.extent, f.kind, body,
                                               f.thread_tag, f.pragmas)

    def visit_Allocate(self, a):
        buf = a.buffer
        if self.in_kernel and buf.scope == "global":
            new = S.Buffer(buf.name, buf.shape, buf.dtype, "local" if self.depth else "shared",
                           buf.align, buf.swizzle)
            self.map[buf] = new
            buf = new
        body = self.visit(a.body)
        return S.Allocate(buf, body)

    def visit_BufferLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        return E.BufferLoad(self.map.get(e.buffer, e.buffer), idx)

    def visit_BufferStore(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        return dataclasses.replace(s, buffer=self.map.get(s.buffer, s.buffer),
                                   value=self.visit(s.value), indices=idx)


def gpu_storage_scope(func: S.PrimFunc) -> S.PrimFunc:
    return func.with_body(_Rescope().visit(func.body))


# ----------------------------------------------------------------------------------------
# kernels


@dataclass
class Kernel:
    name: str
    body: S.Stmt
    params: List  # Buffer | Var, in the order of the kernel's arguments
    launch: Dict[str, E.Expr]  # tag -> extent (1 when the tag is unused)
    shared_bytes: int = 0
    loops: Dict[str, List[str]] = field(default_factory=dict)  # tag -> loop names
    shared: List = field(default_factory=list)  # shared buffers, declared at kernel scope

    @property
    def grid(self):
        return tuple(self.launch[t] for t in TAGS[:3])

    @property
    def dynamic_shared_bytes(self) -> int:
        """The bytes of dynamic shared memory a CUDA launch passes: all of the block's when
        they exceed what it may declare statically, else none."""
        return self.shared_bytes if self.shared_bytes > MAX_SHARED_BYTES else 0

    def shared_offsets(self):
        """(buffer, byte offset) of each shared buffer in one block of shared memory, every
        one 16-byte aligned (1024-byte aligned where swizzled)."""
        return shared_layout(self.shared)[0]

    @property
    def block(self):
        return tuple(int(self.launch[t].value) for t in TAGS[3:])


def _var_stages(func):
    out = {}
    sched = func.attrs.get("schedule")
    if sched is not None:
        for st in sched.stages:
            for iv in st.all_iter_vars:
                out[iv.var] = st.name
    return out


def _loop_name(var, stages):
    st = stages.get(var)
    if st is None:  # loops made by lowering (cross-thread reduction steps) keep a stage prefix
        for v, name in stages.items():
            if var.name.startswith(v.name + "."):
                st = name
                break
    return f"'{var.name}' of stage '{st}'" if st else f"'{var.name}'"


def _nbytes(buf):
    n = 1
    for d in buf.shape:
        d = arith.simplify(d)
        if not isinstance(d, E.IntImm):
            return None
        n *= d.value
    return n * max(1, dt.bits(buf.dtype) // 8)


def split_kernels(func: S.PrimFunc) -> S.PrimFunc:
    body = func.body
    host_buffers = []
    while isinstance(body, S.Allocate):
        if body.buffer.scope != "global":
            raise BuildError(f"buffer '{body.buffer.name}' in {body.buffer.scope} scope is "
                             "allocated outside every kernel; compute_at its stage inside a "
                             "block-bound loop")
        host_buffers.append(body.buffer)
        body = body.body
    nests = list(body.stmts) if isinstance(body, S.SeqStmt) else [body]
    stages = _var_stages(func)
    kernels = []
    for k, nest in enumerate(nests):
        if not (isinstance(nest, S.For) and nest.kind is S.ForKind.THREAD_BINDING):
            raise BuildError(f"the loop nest {k} of '{func.name}' does not start with a loop "
                             "bound to blockIdx/threadIdx; bind the outermost loops of every "
                             "stage computed at root")
        kernels.append(_make_kernel(func, nest, f"{func.name}_kernel{k}" if len(nests) > 1
                                    else f"{func.name}_kernel", host_buffers, stages))
    out = func.with_body(func.body)
    out.attrs["kernels"] = kernels
    out.attrs["host_buffers"] = host_buffers
    return out


def _preorder(s, fn):
    """Calls fn on every statement under `s`, parents before children, in program order."""
    fn(s)
    if isinstance(s, S.SeqStmt):
        for x in s.stmts:
            _preorder(x, fn)
    elif isinstance(s, (S.For, S.LetStmt, S.Allocate)):
        _preorder(s.body, fn)
    elif isinstance(s, S.IfThenElse):
        _preorder(s.then_case, fn)
        if s.else_case is not None:
            _preorder(s.else_case, fn)


class _Widen(Mutator):
    def __init__(self, widen):
        self.widen = widen      # id(For) -> launch extent

    def visit_For(self, f):
        body = self.visit(f.body)
        ext = self.widen.get(id(f))
        if ext is None:
            return f if body is f.body else S.For(f.var, f.min, f.extent, f.kind, body,
                                                   f.thread_tag, f.pragmas)
        guard = S.IfThenElse(E.likely(E.LT(f.var, f.extent)), body)
        return S.For(f.var, f.min, E.const(ext), f.kind, guard, f.thread_tag, f.pragmas)


def _whole_axes(func):
    """Variables of the leaf loops that are a whole (never split) axis of their stage."""
    out = set()
    sched = func.attrs.get("schedule")
    if sched is not None:
        for st in sched.stages:
            if isinstance(st.op, PlaceholderOp):
                continue
            roots = set(st.op.axis) | set(st.op.reduce_axis)
            out |= {iv.var for iv in st.leaf_iter_vars if iv in roots}
    return out


def _is_whole_axis(var, whole):
    # loops made by a cross-thread reduction are named after its thread axis: "k.s4", "k.w"
    if var in whole:
        return True
    base, _, step = var.name.rpartition(".")
    return (step == "w" or step[:1] == "s" and step[1:].isdigit()) and \
        any(v.name == base for v in whole)


def _widen_thread_loops(nest, loops, whole):
    """Loops bound to one threadIdx tag with different constant extents, where each smaller
    loop is a whole axis of its stage bound directly to the tag (e.g. the thread axis that
    rfactor made the length of a short row, in a block whose threads come from a split by a
    larger factor): the block gets the largest extent and the smaller loops run on all those
    threads with the extra ones masked, provided they hold no barrier (every thread must
    reach a barrier). Thread counts chosen by splits must agree: the extent check reports
    those."""
    widen = {}
    for tag in TAGS[3:]:
        fs = loops.get(tag, [])
        exts = [arith.simplify(x.extent) for x in fs]
        if len(fs) < 2 or not all(isinstance(e, E.IntImm) for e in exts):
            continue
        top = max(e.value for e in exts)
        small = [x for x, e in zip(fs, exts) if e.value < top]
        if not small or any(has_barrier(x.body) or not _is_whole_axis(x.var, whole)
                            for x in small):
            continue
        for x in small:
            widen[id(x)] = top
    if not widen:
        return nest
    new_loops = {}
    out = _Widen(widen).visit(nest)

    def f(n):
        if isinstance(n, S.For) and n.kind is S.ForKind.THREAD_BINDING:
            new_loops.setdefault(n.thread_tag, []).append(n)
    _preorder(out, f)
    loops.clear()
    loops.update(new_loops)
    return out


def shared_align(buf) -> int:
    """A shared buffer's alignment in bytes: 16 (a 16-byte move), 1024 where swizzled (the
    pattern is a function of the address bits; 8 rows of 128 bytes)."""
    return 1024 if buf.swizzle else 16


def shared_layout(shared):
    """([(buffer, byte offset)], total bytes) of shared buffers laid out one after another,
    each at its alignment."""
    out, at = [], 0
    for b in shared:
        a = shared_align(b)
        at = -(-at // a) * a
        out.append((b, at))
        at += -(-_nbytes(b) // 16) * 16
    return out, at


def check_shared(name, shared, limit):
    """Raises when kernel `name`'s shared buffers take more than `limit` bytes."""
    total = shared_layout(shared)[1]
    if total > limit:
        parts = ", ".join(f"'{b.name}' {_nbytes(b)} B" for b in shared)
        raise BuildError(f"kernel {name}: shared memory of {total} bytes ({parts}) exceeds "
                         f"the {limit // 1024} KiB a block can have; use smaller tiles (or "
                         "fewer multi_buffer stages) for the shared caches")


def _make_kernel(func, nest, name, host_buffers, stages):
    loops: Dict[str, list] = {}
    shared = []

    def f(n):
        if isinstance(n, S.For) and n.kind is S.ForKind.THREAD_BINDING:
            loops.setdefault(n.thread_tag, []).append(n)
        elif isinstance(n, S.Allocate):
            # loop partitioning may copy an Allocate; the copies are one buffer
            if n.buffer.scope == "shared" and n.buffer not in shared:
                shared.append(n.buffer)
            elif n.buffer.scope == "global":
                raise BuildError(f"kernel {name}: buffer '{n.buffer.name}' needs global memory "
                                 "inside a kernel")
    _preorder(nest, f)
    nest = _widen_thread_loops(nest, loops, _whole_axes(func))
    launch = {}
    for tag in TAGS:
        fs = loops.get(tag, [])
        if not fs:
            launch[tag] = E.const(1)
            continue
        ext = arith.simplify(fs[0].extent)
        for other in fs[1:]:
            e2 = arith.simplify(other.extent)
            if not arith.equal(ext, e2):
                raise ScheduleError(
                    f"{tag} is bound to loops of different extents in kernel {name}: "
                    f"{_loop_name(fs[0].var, stages)} has {ext} iterations and "
                    f"{_loop_name(other.var, stages)} has {e2}; every loop bound to one thread "
                    "tag in a kernel must have the same extent (split with nparts= to match)")
        if tag.startswith("threadIdx") and not isinstance(ext, E.IntImm):
            raise ScheduleError(f"{tag}: the loop {_loop_name(fs[0].var, stages)} has the "
                                f"non-constant extent {ext}; split it by a constant factor and "
                                "bind the inner loop to threads")
        launch[tag] = ext
    nthreads = 1
    for t in TAGS[3:]:
        nthreads *= launch[t].value
    if nthreads > MAX_THREADS_PER_BLOCK:
        desc = ", ".join(f"{t}={launch[t].value}" for t in TAGS[3:] if launch[t].value > 1)
        raise BuildError(f"kernel {name}: {nthreads} threads per block ({desc}) exceeds the "
                         f"limit of {MAX_THREADS_PER_BLOCK}; use smaller thread splits")
    for b in shared:
        if _nbytes(b) is None:
            raise BuildError(f"kernel {name}: shared buffer '{b.name}' has the non-constant "
                             f"size {list(b.shape)}; shared memory needs constant sizes")
    total = shared_layout(shared)[1]
    check_shared(name, shared, max(a.max_shared_per_block for a in ARCHS.values()))
    # parameters: function params and host buffers that the kernel uses, in order
    used_bufs = set()

    def g(n):
        if isinstance(n, (E.BufferLoad, S.BufferStore, S.Prefetch)):
            used_bufs.add(n.buffer)
    walk(nest, g)
    fv = free_vars(nest)
    for e in launch.values():
        fv |= free_vars(e)
    params = [p for p in func.params if (p in used_bufs if isinstance(p, S.Buffer) else p in fv)]
    params += [b for b in host_buffers if b in used_bufs]
    return Kernel(name, nest, params, launch, total,
                  {t: [x.var.name for x in fs] for t, fs in loops.items()}, shared)
