"""The runtime's trace ring (trace.c): what each host run and each parallel loop did, kept
always, read after the fact.

A slow call (p99) cannot be asked for again, so the runtime records as it goes, in a ring
of the last 16384 records (~30 ns each, a few microseconds per call of a network of a
hundred kernels): a native walk's start and each kernel's end (`RUN`, `KERNEL`), each
parallel loop handed to the pool (`LOOP`: its tasks, those the caller ran, when the first
worker claimed one, when the caller's own ran out, when it was done, the workers asleep at
its launch), and a worker's park and wake (`PARK`, `WAKE`: with the time from the wake-up
sent to the worker running). `read(since)` gives the records since an earlier `read`;
bench/tail.py attributes each slow call with them.

Times are CLOCK_MONOTONIC nanoseconds (time.monotonic_ns). Where the pool's library is not
loaded there is nothing to read (`read` gives no records).
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import threadpool

RUN, KERNEL, LOOP, PARK, WAKE = 1, 2, 3, 4, 5
SIZE, WORDS = 16384, 8
# the words of each kind after (time, kind): unused ones are 0
FIELDS = {
    RUN: ("entry", "table"),                 # the walk starts at entry `entry` of `table`
    KERNEL: ("entry", "table"),              # entry `entry` of `table` returned
    LOOP: ("tasks", "caller_tasks", "worker_start_ns", "caller_done_ns", "done_ns", "asleep"),
    PARK: ("worker", "lost"),                # `lost`: its spin had lost its core
    WAKE: ("worker", "wake_ns"),             # nanoseconds from the wake-up sent
}


def _c(symbol, restype, *argtypes):
    return threadpool.library_function(symbol, *argtypes, restype=restype)


def set_enabled(on: bool) -> bool:
    """Turns recording on or off (on by default) and returns whether it was on."""
    was = enabled()
    fn = _c("tdsl_trace_set", None, ctypes.c_int64)
    if fn is not None:
        fn(1 if on else 0)
    return was


def enabled() -> bool:
    fn = _c("tdsl_trace_enabled", ctypes.c_int)
    return bool(fn()) if fn is not None else False


def read(since: int = 0):
    """(records, count): the records numbered from `since` (the count an earlier `read`
    returned; 0: all the ring holds) as an int64 array of rows (time, kind, six words: see
    FIELDS), and the count to pass next time. Records older than the ring's 16384 are
    gone; read between runs (a record written meanwhile may be torn)."""
    fn = _c("tdsl_trace_read", ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
            ctypes.POINTER(ctypes.c_int64))
    if fn is None:
        return np.zeros((0, WORDS), np.int64), since
    n = min(SIZE, max(count() - since, 0) + 64)       # and a few written meanwhile
    out = np.empty((n, WORDS), np.int64)
    first = ctypes.c_int64()
    total = fn(out.ctypes.data, since, n, ctypes.byref(first))
    return out[:max(total - first.value, 0)].copy(), total


def count() -> int:
    """The records written so far (what `read` would return as its count); 0 where the
    library is not loaded."""
    fn = _c("tdsl_trace_count", ctypes.c_int64)
    return fn() if fn is not None else 0
