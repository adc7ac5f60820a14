"""The worker pool behind parallel loops (threadpool.c) and the kernels' heap scratch
(scratch.c): compiled by the system C compiler once per machine (kept in the disk cache)
and loaded once per process; generated code calls `tdsl_parallel_for` and
`tdsl_scratch_alloc`/`tdsl_scratch_free`. Exported libraries compile the same sources in.
The library loaded here also holds the walk of a host run's kernel calls (calls.c,
callseq.py), which exported libraries do not need.

Without a C compiler (or with TDSL_NO_THREADPOOL set), code generation falls back to
creating threads per launch (pthread_create/join from the generated code): correct,
~50 us slower per parallel loop; and to libc's aligned_alloc/free for scratch.

`stats()` counts what the pool did: how many parallel loops a network's run opens, and
how often the workers slept between them; `scratch_stats()` what the scratch holds.

A parallel loop is split into one task per thread; with `set_task_ns(ns)` a long one is
split into more, each of about `ns` nanoseconds of work (from the loop's last run): where
a worker loses its core mid-task, the loop then waits for one short task rather than for
the worker's half. Off by default (0): on a quiet machine the finer split cost up to ~9%
at the median (tasks taken from the other core's cache). A thread now takes from a run
another has started only when that owner is late (`set_steal_late_only`), which was meant
to remove that cost; not yet measured on a quiet machine, so the split stays off.

Every loop handed to the workers is recorded in the runtime's trace ring (runtrace).

`hold()` ... `release()` (or `with held():`) keeps the workers awake across many parallel
loops, as a graph executor's run does: between them no worker parks, so that no loop of
the run waits for a worker to be woken (threadpool.c, tdsl_parallel_hold).
"""
from __future__ import annotations

import os

from ..errors import ArgumentError, TdslError

SYMBOL = "tdsl_parallel_for"
STATS = ("launches", "worker_sleeps", "caller_sleeps", "sleeping", "workers", "holds", "held",
         "lost_sleeps", "worker_tasks", "wait_ns", "tasks", "taken", "nudges")
SCRATCH_STATS = ("mapped", "mapped_bytes", "reused", "kept")
_state = {}


def load_into_jit() -> bool:
    """Makes `tdsl_parallel_for` visible to JIT-compiled code; False if unavailable."""
    if "jit" not in _state:
        _state["jit"] = False if os.environ.get("TDSL_NO_THREADPOOL") else _load()
    return _state["jit"]


def _load() -> bool:
    from . import ccompiler
    from .libfile import dlopen_bytes
    if ccompiler.find() is None or not all(map(os.path.exists, ccompiler.HOST_SOURCES)):
        return False
    import llvmlite.binding as llvm
    source = ""
    for path in ccompiler.HOST_SOURCES:
        with open(path) as f:
            source += f.read()
    try:
        lib = ccompiler.cached_library(source, ["-O2", "-pthread"], "threadpool",
                                       "the parallel-loop worker pool")
        dlopen_bytes(lib, "the parallel-loop worker pool", llvm.load_library_permanently)
    except TdslError:
        return False
    _state["jit"] = True
    # looked up now, with the library: a run's first hold must not reach into llvmlite
    # (a first call at a new size runs no compiler code, tests/test_graph_first_call.py)
    for symbol in ("tdsl_parallel_hold", "tdsl_parallel_release"):
        library_function(symbol)
    return True


def stats() -> dict:
    """The pool's counters since the process started: `launches` (parallel loops handed to
    the workers), `worker_sleeps` (a worker had no launch within its spin and slept:
    many per run of a network mean that another process had its core), `caller_sleeps` (a
    launching thread slept waiting for its workers), `lost_sleeps` (a worker slept, while
    held, after its spin lost its core), `holds`, `tasks` (the launches' tasks), `worker_tasks`
    (those the workers ran; the launching threads ran the rest), `wait_ns` (nanoseconds a launching thread, its
    own claims run out, waited for tasks a worker still held: a worker that lost its core
    mid-task holds up its whole loop), `taken` (tasks a thread took from a run another
    thread had started: its owner was late), `nudges` (a worker that ran none of its tasks
    in several launches in a row moved off the launching thread's CPU, where it was likely
    queued behind it: threadpool.c), and now: `sleeping` (workers asleep), `workers`,
    `held` (holds in force). Empty where the pool is not loaded. bench/tail.py reads them
    per call."""
    return _counters("tdsl_parallel_stats", STATS)


def worker_ids() -> list:
    """The kernel thread ids (Linux `gettid`) of the pool's workers started so far (the
    pool starts them on the first parallel loop and keeps them): what a tool that reads
    per-thread CPU time or run delay (/proc/self/task/ID) needs to tell the pool's work
    from other threads'. Empty where the pool is not loaded or not on Linux."""
    import ctypes
    fn = library_function("tdsl_parallel_worker_ids", ctypes.POINTER(ctypes.c_int64), ctypes.c_int64,
                     restype=ctypes.c_int64)
    if fn is None:
        return []
    out = (ctypes.c_int64 * 256)()
    n = fn(out, len(out))
    return [t for t in out[:n] if t > 0]


def hold():
    """Keeps the pool's workers awake (spinning, with yields) until the matching `release`
    and for a millisecond after the last one: for a caller that runs many parallel loops
    with work of its own between them. Holds from several threads count; the first wakes
    sleeping workers. Does nothing where the pool is not loaded."""
    (library_function("tdsl_parallel_hold") or _nothing)()


def release():
    """Ends a `hold` (every hold is released once, in a finally)."""
    (library_function("tdsl_parallel_release") or _nothing)()


def task_ns() -> int:
    """How long the pool aims a task of a long parallel loop at (ns); 0 where loops are
    split only across the threads or the pool is not loaded."""
    import ctypes
    fn = library_function("tdsl_parallel_task_ns", restype=ctypes.c_int64)
    return fn() if fn is not None else 0


def set_task_ns(ns: int) -> int:
    """Sets `task_ns` (0: every loop gets one task per thread, however long) and returns
    the value it had: a loop whose work exceeds threads x `ns` is split into about work/`ns`
    tasks at its next run. Smaller tasks bound a stalled worker's hold on its loop more
    tightly, and each costs a claim and a call."""
    if not isinstance(ns, int) or isinstance(ns, bool) or ns < 0:
        raise ArgumentError(f"threadpool.set_task_ns: ns must be an int >= 0, not {ns!r}")
    old = task_ns()
    import ctypes
    fn = library_function("tdsl_parallel_set_task_ns", ctypes.c_int64)
    if fn is not None:
        fn(ns)
    return old


def steal_late_only() -> bool:
    """Whether a thread takes from a started run only when its owner is late (see
    `set_steal_late_only`); True where the pool is not loaded."""
    import ctypes
    fn = library_function("tdsl_parallel_steal_late", restype=ctypes.c_int64)
    return bool(fn()) if fn is not None else True


def set_steal_late_only(on: bool) -> bool:
    """Whether a thread done with its own tasks takes from another's run only when that
    run's owner is late (its current task has run over twice the thief's longest), rather
    than as soon as it can; returns the setting it had (on by default). Where tasks are
    one per thread (`task_ns` 0) it changes nothing: a run is one task, claimed whole."""
    import ctypes
    fn = library_function("tdsl_parallel_set_steal_late", ctypes.c_int64, restype=ctypes.c_int64)
    return bool(fn(1 if on else 0)) if fn is not None else bool(on)


NUDGE_MODES = ("off", "free", "always")


def set_nudge(mode: str) -> str:
    """When the pool moves a worker that ran none of its tasks in several launches in a row
    off the launching thread's CPU (where it is likely queued behind the caller, see
    threadpool.c): "free", only where the machine has no more runnable threads than the
    launch has (the default: a CPU is free for it); "always"; or "off". Returns the mode it
    had ("free" where the pool is not loaded)."""
    if mode not in NUDGE_MODES:
        raise ArgumentError(f"threadpool.set_nudge: mode must be one of {NUDGE_MODES}, not {mode!r}")
    import ctypes
    fn = library_function("tdsl_parallel_set_nudge", ctypes.c_int64, restype=ctypes.c_int64)
    return NUDGE_MODES[fn(NUDGE_MODES.index(mode))] if fn is not None else "free"


class held:
    """`with held():` holds the pool (`hold`/`release`) for the block."""

    def __enter__(self):
        hold()
        return self

    def __exit__(self, *exc):
        release()


def _nothing():
    pass


def scratch_stats() -> dict:
    """The kernels' heap scratch since the process started: `mapped` blocks (and their
    `mapped_bytes`), requests `reused` a kept block for, and blocks `kept` free now. A
    call that maps no new block touched no fresh scratch memory. Empty where the library
    is not loaded (kernels then use aligned_alloc)."""
    return _counters("tdsl_scratch_stats", SCRATCH_STATS)


def _counters(symbol, names) -> dict:
    import ctypes
    fn = library_function(symbol, ctypes.POINTER(ctypes.c_int64))
    if fn is None:
        return {}
    out = (ctypes.c_int64 * len(names))()
    fn(out)
    return dict(zip(names, out))


def library_function(symbol, *argtypes, restype=None):
    """The pool library's function `symbol` (returning `restype`) as a ctypes function of
    `argtypes`, looked up once; None where the library is not loaded (the trace ring's
    reader, runtrace.py, finds its functions here too: trace.c is in the same library)."""
    fn = _state.get(symbol, False)
    if fn is False:
        import ctypes
        addr = 0
        if load_into_jit():
            import llvmlite.binding as llvm
            addr = llvm.address_of_symbol(symbol)
        fn = _state[symbol] = ctypes.CFUNCTYPE(restype, *argtypes)(addr) if addr else None
    return fn
