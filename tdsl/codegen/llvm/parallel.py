"""Parallel loops for the LLVM backend: outlining and a pthread fork-join.

For a `For(kind=PARALLEL)` at one site we emit three internal functions:

- `<sym>_parN_body(ptr noalias buf..., scalars..., i64 begin, i64 end) -> i32`: the loop
  over [begin, end) with everything it uses passed as arguments, so buffer pointers keep
  `noalias` and allocas of the body live (thread-private) in this function;
- `<sym>_parN_task(ptr task) -> ptr`: the `pthread_create` entry; `task` is
  `{ptr closure, i64 begin, i64 end}`, the closure `{i32 err, captured values...}`;
- `<sym>_parN_launch(ptr closure, i64 lo, i64 hi)`: hands [lo, hi) to the runtime's
  persistent worker pool (`tdsl_parallel_for`, tdsl/runtime/threadpool.c), which splits it
  into contiguous chunks, one per thread or more for a long loop, from what it keeps in the
  site's word `<sym>_parN_launch_site`. Where the pool is not available (no C compiler), it
  splits [lo, hi) into `min(num_threads, hi - lo)` chunks, starts threads for chunks 1..,
  runs chunk 0 itself and joins; a failed `pthread_create` runs that chunk on the calling
  thread.

The caller fills the closure (an alloca of its entry block), calls the launcher and
returns the body's error code, if any. `num_threads` is the module global
`__tdsl_num_threads`, set by the runtime when the module is loaded.

A loop with the pragma `("parallel_when", cond)` (a schedule's run-time test of its work,
where its sizes are only known per call) forks only when `cond` holds; otherwise the
caller runs the body function over the whole range itself: a fork-join costs more than a
small loop nest (a sequence of one token) saves. That body function is `noinline`, so that
LLVM compiles its loop nest once, not once more inlined into the caller.
"""
from __future__ import annotations

from llvmlite import ir

from ... import dtype as dt
from .irscan import collect_refs
from .types import I8, I32, I64, PTR, int_const_value

MAX_THREADS = 256
TASK = ir.LiteralStructType([PTR, I64, I64])


def emit_parallel_for(em, loop):
    """Emits `loop` (PARALLEL) at the emitter `em`'s position as a fork-join."""
    mb = em.mb
    bl = em.builder
    lo = em.to_i64(em.cast(em.expr(loop.min), loop.min.dtype, loop.var.dtype), loop.var.dtype)
    ext = em.to_i64(em.cast(em.expr(loop.extent), loop.extent.dtype, loop.var.dtype),
                    loop.var.dtype)
    hi = em.int_arith("add", lo, ext, "int64")
    ce = int_const_value(ext)
    if ce is not None and ce <= 0:
        return

    vars_, bufs = {}, {}
    collect_refs(loop.body, vars_, bufs)
    cap_bufs = [b for b in bufs if b in em.bufs]
    cap_vars = [v for v in vars_ if v in em.env and v is not loop.var]
    cap_vals = [em.env[v] for v in cap_vars]

    name = mb.fresh("par")
    # 1. body function ----------------------------------------------------------------
    arg_types = [PTR] * len(cap_bufs) + [v.type for v in cap_vals] + [I64, I64]
    body_fn = ir.Function(mb.module, ir.FunctionType(I32, arg_types), name + "_body")
    mb.add_fn_attrs(body_fn, internal=True)
    when = dict(loop.pragmas).get("parallel_when")
    if when is not None:
        # called from the serial path as well as from the task: inlined there, LLVM
        # would optimise and compile the loop nest twice to save one call per kernel call
        body_fn.attributes.add("noinline")
    sub = em.child(body_fn)
    args = list(body_fn.args)
    for b, a in zip(cap_bufs, args):
        a.add_attribute("noalias")
        sub.bufs[b] = a
    for v, a in zip(cap_vars, args[len(cap_bufs):]):
        sub.env[v] = a
    begin, end = args[-2], args[-1]
    vt = ir.IntType(dt.bits(loop.var.dtype))
    if vt.width < 64:
        begin = sub.builder.trunc(begin, vt)
        end = sub.builder.trunc(end, vt)
    sub.serial_loop(loop.var, begin, end, loop.body, reads_inside=mb.over_sizes(loop))
    sub.finish()

    # 2. trampoline -------------------------------------------------------------------
    closure_t = ir.LiteralStructType([I32] + [PTR] * len(cap_bufs) + [v.type for v in cap_vals])
    task_fn = ir.Function(mb.module, ir.FunctionType(PTR, [PTR]), name + "_task")
    mb.add_fn_attrs(task_fn, internal=True)
    tb = ir.IRBuilder(task_fn.append_basic_block("entry"))
    task = task_fn.args[0]
    clo = tb.load(tb.gep(task, [ir.Constant(I32, 0), ir.Constant(I32, 0)], source_etype=TASK),
                  typ=PTR)
    tbeg = tb.load(tb.gep(task, [ir.Constant(I32, 0), ir.Constant(I32, 1)], source_etype=TASK),
                   typ=I64)
    tend = tb.load(tb.gep(task, [ir.Constant(I32, 0), ir.Constant(I32, 2)], source_etype=TASK),
                   typ=I64)
    call_args = []
    for k, t in enumerate(closure_t.elements[1:], start=1):
        p = tb.gep(clo, [ir.Constant(I32, 0), ir.Constant(I32, k)], source_etype=closure_t)
        call_args.append(tb.load(p, typ=t))
    rc = tb.call(body_fn, call_args + [tbeg, tend])
    errb = task_fn.append_basic_block("err")
    done = task_fn.append_basic_block("done")
    tb.cbranch(tb.icmp_signed("!=", rc, ir.Constant(I32, 0)), errb, done)
    tb.position_at_end(errb)
    errp = tb.gep(clo, [ir.Constant(I32, 0), ir.Constant(I32, 0)], source_etype=closure_t)
    # (builder.store_atomic insists on typed pointers)
    tb._insert(ir.instructions.StoreAtomicInstr(tb.block, rc, errp, "monotonic", 4))
    tb.branch(done)
    tb.position_at_end(done)
    tb.ret(ir.Constant(PTR, None))

    # 3. launcher ---------------------------------------------------------------------
    launch = _emit_launcher(mb, name + "_launch", task_fn, MAX_THREADS)

    # 4. call site --------------------------------------------------------------------
    join = None if when is None else \
        _emit_serial_unless(em, when, body_fn, [em.bufs[b] for b in cap_bufs] + cap_vals, lo, hi)
    closure = em.alloca_builder.alloca(closure_t, name=name + "_closure")
    closure.align = 8
    closure.type = PTR
    vals = [ir.Constant(I32, 0)] + list(em.bufs[b] for b in cap_bufs) + cap_vals
    for k, v in enumerate(vals):
        p = bl.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, k)], source_etype=closure_t)
        bl.store(v, p)
    bl.call(launch, [closure, lo, hi])
    err = bl.load(bl.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, 0)],
                         source_etype=closure_t), typ=I32)
    failb = em.new_block("par.fail")
    okb = em.new_block("par.ok")
    bl.cbranch(bl.icmp_signed("!=", err, ir.Constant(I32, 0)), failb, okb)
    bl.position_at_end(failb)
    bl.ret(err)
    bl.position_at_end(okb)
    if join is not None:
        bl.branch(join)
        bl.position_at_end(join)


def _emit_serial_unless(em, when, body_fn, args, lo, hi):
    """Where `when` is false at run time, the body over [lo, hi) on this thread. Returns
    the block both ways join at; the builder is left where `when` holds (the fork-join
    is emitted there, then branches to the join)."""
    bl = em.builder
    cond = em.expr(when)
    if cond.type != ir.IntType(1):
        cond = bl.icmp_signed("!=", cond, ir.Constant(cond.type, 0))
    serial, fork = em.new_block("par.serial"), em.new_block("par.fork")
    failb, done = em.new_block("par.serial.fail"), em.new_block("par.join")
    bl.cbranch(cond, fork, serial)
    bl.position_at_end(serial)
    rc = bl.call(body_fn, args + [lo, hi])
    bl.cbranch(bl.icmp_signed("!=", rc, ir.Constant(I32, 0)), failb, done)
    bl.position_at_end(failb)
    bl.ret(rc)
    bl.position_at_end(fork)
    return done


def _emit_pool_call(mb, b, name, task_fn, closure, lo, hi, max_threads):
    """The launcher's body where the runtime's persistent workers serve it
    (tdsl/runtime/threadpool.c, `tdsl_parallel_for`): the pool splits [lo, hi) itself, into
    as many chunks as threads or, for a loop whose last run was long, more, from what it
    keeps in the site's own word `<name>_site` (its cost per iteration)."""
    from ...runtime import threadpool
    site = ir.GlobalVariable(mb.module, I64, name + "_site")
    site.linkage = "internal"
    site.initializer = ir.Constant(I64, 0)
    site.align = 8
    launch = mb.declare(threadpool.SYMBOL, ir.VoidType(), [PTR, PTR, I64, I64, I64, PTR])
    nt = b.sext(b.load(mb.num_threads_global, typ=I32), I64)
    nt = b.select(b.icmp_signed("<", nt, ir.Constant(I64, max_threads)), nt,
                  ir.Constant(I64, max_threads))
    b.call(launch, [task_fn, closure, lo, hi, nt, site])
    b.ret_void()


def _alloca(b, typ, name):
    a = b.alloca(typ, name=name)
    a.align = 16
    a.type = PTR  # llvmlite would type it as a typed pointer
    return a


def _emit_launcher(mb, name, task_fn, max_threads):
    fn = ir.Function(mb.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]), name)
    mb.add_fn_attrs(fn, internal=True)
    fn.attributes.add("noinline")
    closure, lo, hi = fn.args
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    if mb.use_pool:
        _emit_pool_call(mb, b, name, task_fn, closure, lo, hi, max_threads)
        return fn
    tasks_t = ir.ArrayType(TASK, max_threads)
    tasks = _alloca(b, tasks_t, "tasks")
    tids = _alloca(b, ir.ArrayType(I64, max_threads), "tids")
    ok = _alloca(b, ir.ArrayType(I8, max_threads), "started")
    pcreate = mb.declare("pthread_create", I32, [PTR, PTR, PTR, PTR])
    pjoin = mb.declare("pthread_join", I32, [I64, PTR])
    ext = b.sub(hi, lo)
    work = fn.append_basic_block("work")
    ret = fn.append_basic_block("ret")
    b.cbranch(b.icmp_signed(">", ext, ir.Constant(I64, 0)), work, ret)
    b.position_at_end(ret)
    b.ret_void()

    b.position_at_end(work)
    nt = b.sext(b.load(mb.num_threads_global, typ=I32), I64)
    one = ir.Constant(I64, 1)

    def smin(x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)

    def smax(x, y):
        return b.select(b.icmp_signed(">", x, y), x, y)

    nt = smax(smin(smin(nt, ir.Constant(I64, max_threads)), ext), one)
    chunk = b.udiv(b.sub(b.add(ext, nt), one), nt)
    nt = b.udiv(b.sub(b.add(ext, chunk), one), chunk)

    def task_field(i, k):
        return b.gep(tasks, [ir.Constant(I32, 0), i, ir.Constant(I32, k)], source_etype=tasks_t)

    def counted_loop(start, stop, label, body):
        pre = b.block
        loop = fn.append_basic_block(label)
        after = fn.append_basic_block(label + ".end")
        b.cbranch(b.icmp_signed("<", start, stop), loop, after)
        b.position_at_end(loop)
        i = b.phi(I64)
        i.add_incoming(start, pre)
        body(i)
        nxt = b.add(i, one)
        i.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_signed("<", nxt, stop), loop, after)
        b.position_at_end(after)

    def fill(i):
        tb = b.add(lo, b.mul(i, chunk))
        te = smin(b.add(tb, chunk), hi)
        b.store(closure, task_field(i, 0))
        b.store(tb, task_field(i, 1))
        b.store(te, task_field(i, 2))

    counted_loop(ir.Constant(I64, 0), nt, "fill", fill)

    def start(i):
        tp = b.gep(tasks, [ir.Constant(I32, 0), i], source_etype=tasks_t)
        tidp = b.gep(tids, [ir.Constant(I32, 0), i], source_etype=ir.ArrayType(I64, max_threads))
        rc = b.call(pcreate, [tidp, ir.Constant(PTR, None), task_fn, tp])
        started = b.icmp_signed("==", rc, ir.Constant(I32, 0))
        okp = b.gep(ok, [ir.Constant(I32, 0), i], source_etype=ir.ArrayType(I8, max_threads))
        b.store(b.zext(started, I8), okp)
        inl = fn.append_basic_block("inline")
        cont = fn.append_basic_block("cont")
        b.cbranch(started, cont, inl)
        b.position_at_end(inl)
        b.call(task_fn, [tp])
        b.branch(cont)
        b.position_at_end(cont)

    counted_loop(one, nt, "spawn", start)
    b.call(task_fn, [b.gep(tasks, [ir.Constant(I32, 0), ir.Constant(I32, 0)],
                           source_etype=tasks_t)])

    def join(i):
        okp = b.gep(ok, [ir.Constant(I32, 0), i], source_etype=ir.ArrayType(I8, max_threads))
        started = b.icmp_unsigned("!=", b.load(okp, typ=I8), ir.Constant(I8, 0))
        jb = fn.append_basic_block("join")
        cont = fn.append_basic_block("joined")
        b.cbranch(started, jb, cont)
        b.position_at_end(jb)
        tidp = b.gep(tids, [ir.Constant(I32, 0), i], source_etype=ir.ArrayType(I64, max_threads))
        b.call(pjoin, [b.load(tidp, typ=I64), ir.Constant(PTR, None)])
        b.branch(cont)
        b.position_at_end(cont)

    counted_loop(one, nt, "joinall", join)
    b.ret_void()
    return fn
