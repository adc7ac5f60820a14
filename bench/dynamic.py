"""Networks of any size (`python bench/zoo.py --dynamic`): each model exported with its batch
symbolic (and the sequence of the transformers, the signal length of the 1-D net), built
once by tdsl, then run at a sweep of sizes beside onnxruntime on the same symbolic model,
and beside tdsl's own build of the model made static at that size.

Per (model, size): tdsl's best block mean, the static build's, onnxruntime's
(bench/latency.blocks: `repeat` rounds of one turn per side, the first side rotated from
round to round; a turn is a pause, 0.2 s of warm-up calls, then timed blocks of `number`
calls, or of as many as last 5 ms where calls are short, as many blocks as fit in 50 ms;
at one token, ~0.13 ms a call, a block is ~40 calls and a turn ~10 blocks; each side
holds its last outputs while it runs the next call, as a server's `y = exe.run(x)` loop
does); the ratios dynamic/static and
dynamic/onnxruntime; and "first+ms", what the first call at a size never run before cost
beyond a warm call at that size (0 where it cost less): the median over FIRST_ROUNDS
(FIRST_ROUNDS_LONG where a call takes LONG_CALL_S or more) (first, warm) pairs of the first's seconds less its warm partner's, the pairs' least and
largest difference under "pairs ms"; and "gc ms", the part of the executor's own first
call that Python's collections took. No compile happens there; what
does is all of what a server's first request at a new size pays: tdsl's work for new
sizes (the sizes checked, the memory plan of those sizes evaluated, each kernel's size
class chosen, the run state made and the values of the sizes alone computed: a few ms,
most of it binding each kernel to the new buffers), any first touch of memory, any
Python collection its allocations set off (a first call allocates ~600-1000 tracked
objects, a warm one ~15; the heap the bench held before the call frozen meanwhile, as
`_Cost` says: the exporters' objects are not a server's), and the caches and
machine as they are (a preemption on a shared machine lands in it too). As a server
would, the executor reserves after the build the memory of the largest sizes it expects
(Executor.reserve: arena, outputs, and one run, which pages in the kernels' scratch):
here each dimension's largest in the sweep, with one more batch where that is itself a
size of the sweep, so that every size swept is new to the executor; its seconds are
printed apart. One first call is one sample, and one 170-600 ms call on a shared VM
varies by more than the 20 ms issue 41 allows, so a first call at a size is taken
FIRST_ROUNDS times (FIRST_ROUNDS_LONG where calls are long): the executor's own first call there, then, after the size's blocks,
again and again with the executor returned to where it was before it (Executor.
forget_sizes drops that size's memory plan and run state, the kernels' bindings and
its values of the sizes; the reserved memory stays, as it was) and its last call made
at the sizes run before (reserve's, for the sweep's first size), as the sweep's own
first call follows them. Each first call has its warm partner, a call at that size
right after it, or in every other round right before it (so that another process's load
that comes and goes in step with the rounds falls on both alike). Every call, first or warm, is taken in the same conditions: right
after a call of onnxruntime at that size and a pause in which its spinning workers stop
(right after its block they would take a core from tdsl's call); the difference is
taken within each pair, so that a stretch when another process held a core (a call
twice as long) falls on both of a pair or shows as one outlying pair. Where dynamic/static lies outside [1/STATIC_NOTE, STATIC_NOTE],
a line under the row says, per side, what share of its parallel tasks the pool's workers
ran in its timed blocks and how long tdsl's threads waited for a core (PoolShare): a side
whose worker had no core runs at one core's speed (a mobilenetv2_blocks row read 1.84x so,
each kernel as fast in both builds). Where the first calls cost more than FIRST_NOTE_MS beyond
the warm ones, a line under the row tells tdsl's work from the machine's, each part the
first calls' median beyond the warm calls' median: where the calling thread's time went (on a core, user and system;
runnable but waiting for a core; blocked: on a lock such as another thread's GIL, on
tdsl's pool, on I/O), the CPU of tdsl's pool workers, of onnxruntime's threads and of any
other thread (the busiest named; bench/threadcpu.py reads each thread's CPU clock, so
onnxruntime's threads, which share the process, are kept apart), the Python collections
in the call, its minor page faults, the time tdsl's threads spent waiting for a core,
and the vCPU time the hypervisor took meanwhile (/proc/stat steal: a wait no guest thread
sees). bench/firstcall.py
takes a first call apart (phases, faults,
collections, time waiting for a core, kernels against a warm call, and the static
build's first call in the same conditions). Per model: the build
seconds, dynamic and the mean static, the sizes reserved and the reserve's seconds. The
last lines: the geometric mean of dynamic/onnxruntime over every pair, the worst pair,
the worst dynamic/static, the worst first+ms and the worst build ratio.

Builds are timed cold (`cold_build`): each with an empty kernel cache on disk and in
this process, so that no build reuses kernels another one compiled; wall and CPU
seconds (the CPU of every thread of the process: the build compiles on two), the static
build being the mean over the sweep's sizes. `--builds` (bench/zoo.py --dynamic
--builds) times only the builds.
"""
from __future__ import annotations

import contextlib
import gc
import os
import resource
import tempfile
import time

import numpy as np
import onnx

import tdsl.graph as G
from tdsl import arith
from tdsl.codegen.llvm import jit
from tdsl.graph import executor, models, zoo
from tdsl.runtime import threadpool
from common import frozen_heap
from graph import _ort_session
from latency import _threads, blocks, delays, waited_between
from threadcpu import ThreadOwners, busiest, spent

CNN_BATCHES = (1, 2, 4, 8)
SEQUENCES = ((1, 1), (1, 16), (1, 128), (1, 512), (4, 64), (8, 128))
SIGNALS = ((1, 4000), (1, 16000), (1, 48000), (4, 16000))
# a first call more than this beyond the warm one is taken apart under its row
FIRST_NOTE_MS = 10.0
# (first, warm) pairs per size: the first of them the executor's own first call there,
# the others after Executor.forget_sizes (one sample of a 170-600 ms call varies by more
# than issue 41's 20 ms on a shared VM; the median of five pairs resolves it); where a
# warm call takes LONG_CALL_S or more, FIRST_ROUNDS_LONG pairs (vit_b_16 at 8 images, ~0.7 s
# a call: four pairs of bench/firstcall.py read +43, +20, +6 and -38 ms, with tdsl's own
# work 7.4 ms in each)
FIRST_ROUNDS = 5
FIRST_ROUNDS_LONG = 15
LONG_CALL_S = 0.1
# a row whose dynamic/static latency lies outside [1/this, this] (issue 41's bound) says
# under it how each side's blocks shared the pool's work and waited for a core
STATIC_NOTE = 1.05

# name -> (model maker with symbolic dims, sizes to sweep: full input shapes)
HELPER = {
    "conv1d_net": (lambda: symbolic_axes(models.conv1d_net(), {0: "batch", 2: "signal"}),
                   [(b, 1, n) for b, n in SIGNALS]),
    "conv3d_net": (lambda: symbolic_axes(models.conv3d_net(), {0: "batch"}),
                   [(b, 3, 8, 56, 56) for b in (1, 2, 4)]),
    "mobilenetv2_blocks": (lambda: symbolic_axes(models.mobilenetv2_blocks(1, 112), {0: "batch"}),
                           [(b, 3, 112, 112) for b in CNN_BATCHES]),
}


def symbolic_axes(model, axes):
    """`model` with input axes `axes` ({axis: dim_param}) symbolic, as exporters write them."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for ax, name in axes.items():
        dims[ax].ClearField("dim_value")
        dims[ax].dim_param = name
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    return model


def _sweep(name):
    """(symbolic model, input shapes to run) of a zoo or helper network."""
    if name in HELPER:
        make, shapes = HELPER[name]
        return make(), shapes
    model = zoo.export(name, dynamic=True)
    example = zoo.example_input(name)
    shape = example.shape
    if example.dtype == np.int64:
        return model, [(b, s) for b, s in SEQUENCES]
    return model, [(b,) + tuple(shape[1:]) for b in CNN_BATCHES]


def _input(model, shape, seed=0):
    rng = np.random.default_rng(seed)
    if model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64:
        return rng.integers(0, 1000, shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def _static_dims(model, shape):
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return {d.dim_param: s for d, s in zip(dims, shape) if d.dim_param}


def _reserved(model, shapes):
    """{size variable: value} a server expecting `shapes` would reserve: each variable's
    largest, with one more batch where that is itself one of `shapes` (so that each is
    new to the executor)."""
    sizes = [_static_dims(model, s) for s in shapes]
    top = {v: max(s[v] for s in sizes) for v in sizes[0]}
    if top in sizes:
        top["batch"] += 1
    return top


def _holding(fn):
    """`fn` called as a server's loop calls it (`y = exe.run(x)`): the last call's result
    is still held while the next call runs, so a tdsl executor, static or dynamic, writes
    each call's outputs to memory of its own (runstate.py) and re-binds the kernels that
    write them."""
    held = [None]

    def call():
        held[0] = fn()
    return call


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _stolen_seconds() -> float:
    """Seconds the hypervisor ran something else while this machine's vCPUs wanted to run
    (/proc/stat's steal, every CPU, in clock ticks: 10 ms steps); 0 where not readable.
    A wait no thread of the guest sees: schedstat counts only the guest's own queue."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


class _Cost:
    """What one call of `fn` cost: wall seconds; `by_thread`, a threadcpu.spent of the
    call (CPU seconds by thread owner: the caller, tdsl's pool, onnxruntime's threads,
    other threads, the whole process; the caller's user, system and run delay); `cpu` the
    process's CPU seconds; minor page faults; the seconds the threads in `threads` (/proc
    schedstat paths) spent runnable but waiting for a core; the seconds the hypervisor
    took the machine's vCPUs (`_stolen_seconds`); and the Python collections that ran in
    it (`collections`: (generation, seconds) each). Every object that existed before the
    call is frozen during it (gc.freeze, no collection first), so a collection its own
    allocations set off is charged for what the call made, not for the bench's heap:
    torch, transformers and every model swept before (a full collection of that heap,
    falling into a first call of densenet121 at 8 images, took 1.48 s; a server holding
    one model, without the exporters, has a small fraction of it)."""

    def __init__(self, fn, threads=(), owners=None):
        owners = owners or ThreadOwners()
        spans, start = [], [0.0]

        def watch(phase, info):
            if phase == "start":
                start[0] = time.perf_counter()
            else:
                spans.append((info["generation"], time.perf_counter() - start[0]))
        s0, w0, f0 = _stolen_seconds(), delays(threads), _faults()
        freeze = gc.get_freeze_count() == 0      # not inside a caller's frozen heap
        if freeze:
            gc.freeze()
        gc.callbacks.append(watch)
        try:
            c0 = owners.read()
            t0 = time.perf_counter()
            fn()
            self.wall = time.perf_counter() - t0
            self.by_thread = spent(c0, owners.read())
        finally:
            gc.callbacks.remove(watch)
            if freeze:
                gc.unfreeze()
        self.cpu = self.by_thread["process"]
        self.faults = _faults() - f0
        self.waited = waited_between(w0, delays(threads))
        self.stolen = _stolen_seconds() - s0
        self.collections = spans


class PoolShare:
    """`watch` for latency.blocks: per side, the parallel tasks its timed blocks handed to
    tdsl's pool and how many of them the pool's workers ran (the calling thread runs the
    rest), and the seconds `threads` (schedstat paths) spent runnable but waiting for a
    core. Two cores' worth of speed needs the worker's share of an even split; a worker
    that had no core for a whole block leaves every task to the caller, and the block
    runs at one core's speed, whichever executor it times."""

    def __init__(self, sides, threads=()):
        self.threads = threads
        self.tasks, self.worker_tasks = [0] * sides, [0] * sides
        self.waited, self.calls = [0.0] * sides, [0] * sides

    @contextlib.contextmanager
    def __call__(self, i, calls):
        s0, w0 = threadpool.stats(), delays(self.threads)
        yield
        s1, w1 = threadpool.stats(), delays(self.threads)
        self.tasks[i] += s1.get("tasks", 0) - s0.get("tasks", 0)
        self.worker_tasks[i] += s1.get("worker_tasks", 0) - s0.get("worker_tasks", 0)
        self.waited[i] += waited_between(w0, w1)
        self.calls[i] += calls

    def share(self, i):
        """The workers' share of side `i`'s tasks, or None where it launched none."""
        return self.worker_tasks[i] / self.tasks[i] if self.tasks[i] else None


def _static_note(ratio, pool, workers) -> str:
    """The line under a row whose dynamic/static `ratio` lies outside STATIC_NOTE's band:
    the pool's share of each side's tasks (sides 0 dynamic, 1 static of `pool`, a
    PoolShare) against an even split over `workers` workers and the caller, and tdsl's
    wait for a core per call."""
    if 1 / STATIC_NOTE <= ratio <= STATIC_NOTE:
        return ""

    def side(i):
        sh = pool.share(i)
        calls = max(pool.calls[i], 1)
        return (f"{'no parallel tasks' if sh is None else f'workers ran {sh * 100:.0f}% of its tasks'}, "
                f"tdsl's threads waited for a core {pool.waited[i] / calls * 1e3:.3f} ms a call")
    even = workers / (workers + 1) * 100
    return (f"{'':20s} dynamic/static {ratio:.2f}: dynamic's blocks: {side(0)}; static's: {side(1)} "
            f"(an even split: {even:.0f}%)")


def _first_note(firsts, warms) -> str:
    """The line under a row whose first calls (_Costs) cost more than FIRST_NOTE_MS beyond
    their warm partners (_Costs; the median of the pairs' differences, as the row's
    first+ms), each part the median of the firsts' less the median of the warm calls':
    where the caller's time went (on a core, user and system; waiting for a core;
    blocked, on a lock such as another thread's GIL, on the pool or on I/O), whose
    threads worked (tdsl's pool, onnxruntime's, any other: the busiest named, in the
    first call whose difference is the median), the collections, faults, waits for a
    core and the host's steal."""
    wall = _median_extra(firsts, warms)
    if wall * 1e3 <= FIRST_NOTE_MS:
        return ""

    def med(costs, part):
        return float(np.median([part(c) for c in costs]))

    def beyond(part):
        return (med(firsts, part) - med(warms, part)) * 1e3

    def thread(key):
        return beyond(lambda c: c.by_thread[key])

    def blocked(c):
        return c.wall - c.by_thread["caller"] - c.by_thread["caller_waited"]
    diffs = [f.wall - w.wall for f, w in zip(firsts, warms)]
    mid = firsts[int(np.argsort(diffs)[len(diffs) // 2])]
    gcs = ", ".join(f"gen{g} {d * 1e3:.1f} ms" for g, d in mid.collections) or "none"
    named = busiest(mid.by_thread)
    return (f"{'':20s} first calls +{wall * 1e3:.1f} ms; tdsl's caller: on a core {thread('caller'):+.1f} ms "
            f"(user {thread('caller_user'):+.1f}, system {thread('caller_system'):+.1f}), waiting for a core "
            f"{thread('caller_waited'):+.1f}, blocked {beyond(blocked):+.1f}; CPU of tdsl's pool "
            f"{thread('pool'):+.1f}, onnxruntime's threads {thread('ort'):+.1f}, other threads "
            f"{thread('other'):+.1f}" + (f" ({named})" if named else "") + f", process {thread('process'):+.1f}; "
            f"collections (the median pair's first) {gcs}; page faults {med(firsts, lambda c: c.faults):.0f} "
            f"(median); tdsl's threads waited for a core {beyond(lambda c: c.waited):+.1f} ms more than warm; "
            f"vCPUs stolen by the host {med(firsts, lambda c: c.stolen) * 1e3:.0f} ms (median)")


def _median_extra(firsts, warms) -> float:
    """The median over the (first, warm) pairs (_Costs) of what the first cost beyond its
    warm partner, in seconds."""
    return float(np.median([f.wall - w.wall for f, w in zip(firsts, warms)]))


@contextlib.contextmanager
def cold_caches(prefix="tdsl-cold-"):
    """Within it, nothing compiled before is reused: a fresh disk cache (TDSL_CACHE_DIR),
    the in-process caches of kernels, LLVM objects and simplifications emptied."""
    old = os.environ.get("TDSL_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix=prefix) as cache:
        os.environ["TDSL_CACHE_DIR"] = cache
        executor.clear_kernel_cache()
        jit.clear_cache()
        arith.clear_caches()
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("TDSL_CACHE_DIR", None)
            else:
                os.environ["TDSL_CACHE_DIR"] = old


def cold_build(model, dims, target):
    """(executor, wall s, CPU s) of `model` built with `dims` in `cold_caches()`, with the
    process's heap frozen (common.frozen_heap)."""
    with frozen_heap(), cold_caches():
        t0, c0 = time.perf_counter(), time.process_time()
        exe = G.build(G.optimize(G.from_onnx(model, dims=dims), target=target), target=str(target))
        return exe, time.perf_counter() - t0, time.process_time() - c0


def _build_line(name, dyn, static):
    """The printed build comparison; returns dynamic/static CPU seconds. `dyn`: (wall,
    CPU); `static`: [(wall, CPU)] per size."""
    sw, sc = (float(np.mean(v)) for v in zip(*static))
    print(f"{name:20s} build (cold cache): dynamic {dyn[0]:.2f} s wall, {dyn[1]:.2f} s CPU; "
          f"static {sw:.2f} s wall, {sc:.2f} s CPU (mean of {len(static)}); "
          f"dynamic/static {dyn[0] / sw:.2f}x wall, {dyn[1] / sc:.2f}x CPU", flush=True)
    return dyn[1] / sc


def builds_one(name, target):
    """Only the builds of one model, cold: prints the build line; returns [] and
    dynamic/static CPU seconds."""
    model, shapes = _sweep(name)
    _, *dyn = cold_build(model, None, target)
    static = [cold_build(model, _static_dims(model, shape), target)[1:] for shape in shapes]
    return [], _build_line(name, dyn, static)


def run_one(name, target, number, repeat, pause_s=0.3):
    """Prints the rows of one model; returns [(dynamic/ort, dynamic/static, first+s)] per
    size and the dynamic/static build CPU seconds."""
    model, shapes = _sweep(name)
    dyn, *build_dyn = cold_build(model, None, target)
    owners = _OWNERS
    # a server reserves memory for the largest sizes it expects, so that no request pages
    # in fresh memory (on a VM the first touch of 200 MB took 0.4-2.3 s): timed apart
    reserved = _reserved(model, shapes)
    t0 = time.perf_counter()
    dyn.reserve(**reserved)
    reserve_s = time.perf_counter() - t0
    tdsl_threads = _threads()     # before onnxruntime's: its spinning workers wait by design
    sess = owners.started("ort", lambda: _ort_session(model, target.num_cores))
    iname = sess.get_inputs()[0].name
    out, static_builds = [], []
    # the input of the sizes run last before a size's first call: reserve's, then the last size's
    before = _input(model, [d.dim_value or reserved[d.dim_param]
                            for d in model.graph.input[0].type.tensor_type.shape.dim])

    def after_ort(fn, x):
        """`fn`'s _Cost, taken as every first and warm call is: right after a call of
        onnxruntime at `x`'s size and a pause in which its spinning workers stop."""
        sess.run(None, {iname: x})
        time.sleep(pause_s)
        return _Cost(fn, tdsl_threads, owners)
    for shape in shapes:
        x = _input(model, shape)
        ref = sess.run(None, {iname: x})[0]
        got = None

        def first_call():
            nonlocal got
            got = dyn.run(x)[0]
        firsts = [after_ort(first_call, x)]
        err = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30))
        # as a server hands each output to its client: an output still held when a call
        # at other sizes comes makes that call write its outputs to fresh memory
        del got
        warms = [after_ort(lambda: dyn.run(x), x)]
        collected = sum(d for _, d in firsts[0].collections)
        st, *cost = cold_build(model, _static_dims(model, shape), target)
        static_builds.append(cost)
        pool = PoolShare(3, tdsl_threads)
        t_dyn, t_st, t_ort = blocks([_holding(lambda: dyn.run(x)), _holding(lambda: st.run(x)),
                                     _holding(lambda: sess.run(None, {iname: x}))], number, repeat,
                                    watch=pool)
        for r in range(1, FIRST_ROUNDS if t_dyn < LONG_CALL_S else FIRST_ROUNDS_LONG):
            # the warm partner taken before the first call in every other round: another
            # process's load that comes and goes with the rounds' rhythm then falls on
            # first and warm calls alike
            if r % 2:
                warms.append(after_ort(lambda: dyn.run(x), x))
            # the executor as it was before its first call at these sizes, its last call
            # at the sizes run before
            dyn.forget_sizes(**_static_dims(model, shape))
            dyn.run(before)
            firsts.append(after_ort(lambda: dyn.run(x), x))
            if not r % 2:
                warms.append(after_ort(lambda: dyn.run(x), x))
        before = x
        extra = max(_median_extra(firsts, warms), 0.0)
        spread = [(f.wall - w.wall) * 1e3 for f, w in zip(firsts, warms)]
        out.append((t_dyn / t_ort, t_dyn / t_st, extra))
        print(f"{name:20s} {'x'.join(map(str, shape)):>16s} {t_dyn * 1e3:9.3f} {t_st * 1e3:9.3f} "
              f"{t_ort * 1e3:9.3f} {t_dyn / t_st:7.2f} {t_dyn / t_ort:7.2f} "
              f"{extra * 1e3:8.1f} {f'{min(spread):.0f}..{max(spread):.0f}':>11s} {collected * 1e3:6.1f} "
              f"{err:9.1e}", flush=True)
        for note in (_static_note(t_dyn / t_st, pool, threadpool.stats().get("workers", 0)),
                     _first_note(firsts, warms)):
            if note:
                print(note, flush=True)
    ratio = _build_line(name, build_dyn, static_builds)
    print(f"{name:20s} reserved {', '.join(f'{k}={v}' for k, v in reserved.items())} "
          f"in {reserve_s:.2f} s\n", flush=True)
    return out, ratio


# the threads of tdsl and onnxruntime, learnt as they start them, for the whole process
_OWNERS = ThreadOwners()


def _warm_up(target):
    """A tiny network built static and symbolic before any timed build: the first build
    in a process pays its one-time costs (imports, LLVM's start, caches), which would
    otherwise land on the dynamic build, timed first."""
    for batch in (2, "batch"):
        G.build(G.optimize(G.from_onnx(models.mlp(batch=batch, sizes=(16, 8, 4))), target=target),
                target=str(target))


def main(names, target, number, repeat, builds_only=False):
    _warm_up(target)
    if not builds_only:
        print(f"{'model':20s} {'size':>16s} {'dyn ms':>9s} {'static':>9s} {'ort':>9s} {'/static':>7s} "
              f"{'/ort':>7s} {'first+ms':>8s} {'pairs ms':>11s} {'gc ms':>6s} {'max err':>9s}")
    pairs, failed, build_ratios = [], [], {}
    for name in names:
        try:
            rows, build_ratios[name] = (builds_one(name, target) if builds_only
                                        else run_one(name, target, number, repeat))
            pairs += rows
        except Exception as e:     # a model that fails is reported and the sweep goes on
            failed.append(name)
            print(f"{name:20s} failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                  flush=True)
    if pairs:
        to_ort = [p[0] for p in pairs]
        to_static = [p[1] for p in pairs]
        geo = float(np.exp(np.mean(np.log(to_ort))))
        print(f"geometric mean dynamic/onnxruntime over {len(pairs)} (model, size) pairs: {geo:.2f}x; "
              f"worst {max(to_ort):.2f}x; dynamic/static worst {max(to_static):.2f}x, "
              f"geometric mean {float(np.exp(np.mean(np.log(to_static)))):.2f}x; "
              f"worst first+ms {max(p[2] for p in pairs) * 1e3:.1f}"
              + (f"; failed: {', '.join(failed)}" if failed else ""))
    if build_ratios:
        worst = max(build_ratios, key=build_ratios.get)
        print(f"build dynamic/static (CPU s, cold cache): worst {build_ratios[worst]:.2f}x ({worst}), "
              f"geometric mean {float(np.exp(np.mean(np.log(list(build_ratios.values()))))):.2f}x"
              + (f"; failed: {', '.join(failed)}" if failed and not pairs else ""))
