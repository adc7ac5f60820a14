"""`CallSequence`: a host run's kernel calls in order, run in one native call.

A graph executor's run calls every kernel once. Through ctypes each call costs ~130 ns
plus ~38 ns per argument, and Python's loop around it more: a small transformer at one
token runs 70 kernels in ~0.17 ms, a fifth of it dispatch, and a build with symbolic
sizes passes each kernel its sizes too. TVM's graph executor and onnxruntime walk their
kernels from native code; so does this: the calls' function addresses and argument
words lie in one table (calls.c, compiled into the worker pool's library), walked by
`tdsl_run_calls` in one ctypes call with the GIL released.

The sequence is a list of callables (the `PreparedCall`s of Module.prepared, or any
callable) that keeps its table in step with itself: assigning `seq[i] = call` writes that
entry's words, so whoever rebinds a call (a run state moving its outputs, reading an input
from the caller's array) changes the table by changing the list. A call that cannot run
from native code (`native` None: staging copies around it, a float scalar, no native
function) stays in the table as an entry that hands back to Python: the walk stops there,
`run` makes that call, and the walk resumes after it. Iterating gives the calls themselves,
for a per-kernel profile. Without the pool's library (no C compiler, TDSL_NO_THREADPOOL)
`run` calls each from Python.

Errors are the calls' own: a kernel's nonzero return raises through `PreparedCall.failed`
and a set bounds record through `PreparedCall.finish`, as a call from Python raises them,
and nothing after the failing kernel has run.

Threads: a sequence belongs to one run state, which one caller holds at a time; the walk
keeps its position in the sequence's own words (`at`), so sequences of different states
run at once.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Iterable, List

import numpy as np

from . import runtrace, threadpool

# tdsl_run_calls's results (calls.c)
DONE, PYTHON, FAILED, RECORDED = 0, 1, 2, 3
HEAD = 3        # an entry's words before its arguments: address, count, record
_state = {}


def runner():
    """`tdsl_run_calls` as a ctypes function, or None where the pool's library is not
    loaded."""
    fn = _state.get("runner", False)
    if fn is False:
        fn = None
        if threadpool.load_into_jit():
            import llvmlite.binding as llvm
            addr = llvm.address_of_symbol("tdsl_run_calls")
            if addr:
                fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(addr)
        _state["runner"] = fn
    return fn


def _entry(call) -> tuple:
    """The table words of `call`: its native entry, or one that hands it back to Python."""
    native = getattr(call, "native", None)
    if native is None:
        return (0,) * HEAD
    address, words, record = native
    return (address, len(words), record, *words)


class CallSequence:
    """The calls of one run, in order, and the native table that makes them (see the
    module docstring)."""

    __slots__ = ("_calls", "_entries", "_offsets", "_at", "_table", "_args", "_native", "_run")

    def __init__(self, calls: Iterable[Callable]):
        self._calls: List[Callable] = list(calls)
        self._entries = [_entry(c) for c in self._calls]
        self._at = (ctypes.c_int64 * 3)()       # the walk: entry, word, a failed return code
        self._run = runner()
        self._layout()

    def _layout(self):
        """The table from the entries (again when an entry's length changed)."""
        words, offsets = [len(self._entries)], []
        for e in self._entries:
            offsets.append(len(words))
            words += e
        self._table = (ctypes.c_int64 * len(words))(*words)
        self._offsets = offsets
        self._native = all(e[0] for e in self._entries)
        self._args = (ctypes.c_void_p(ctypes.addressof(self._table)),
                      ctypes.c_void_p(ctypes.addressof(self._at)))

    def __len__(self):
        return len(self._calls)

    def __iter__(self):
        return iter(self._calls)

    def __getitem__(self, i):
        return self._calls[i]

    def __setitem__(self, i, call):
        entry = _entry(call)
        old = self._entries[i]
        self._calls[i] = call
        self._entries[i] = entry
        if len(entry) != len(old):
            self._layout()
            return
        at = self._offsets[i]
        self._table[at:at + len(entry)] = entry
        if bool(entry[0]) != bool(old[0]):
            self._native = all(e[0] for e in self._entries)

    @property
    def native(self) -> bool:
        """Whether a run is one native call (every call has a native entry and the
        library is loaded)."""
        return self._run is not None and self._native

    def run(self):
        """Makes every call in order (the worker pool held throughout, so that no kernel
        waits for a parked worker); raises the first failing call's error, nothing after
        it having run."""
        walk = self._run
        if not self._calls:
            return
        if walk is None:
            self.run_in_python()
            return
        if self._native:
            status = walk(*self._args)
            if status:
                self._stopped(walk, status)
            return
        threadpool.hold()       # across the native stretches and the calls from Python
        try:
            status = walk(*self._args)
            if status:
                self._stopped(walk, status)
        finally:
            threadpool.release()

    def timed_run(self):
        """Makes a run as `run` does and returns its nanosecond stamps from the trace ring
        (runtrace): its start and each call's end, len(self) + 1 of them; None where a run
        is not one native walk or tracing is off (nothing has run: time the calls from
        Python), or where the ring lost the run's records (other threads' runs wrote past
        them: it ran once)."""
        if not (self.native and runtrace.enabled()):
            return None
        since = runtrace.count()
        self.run()
        recs, _ = runtrace.read(since)
        mine = recs[recs[:, 3] == ctypes.addressof(self._table)]
        starts = np.flatnonzero(mine[:, 1] == runtrace.RUN)
        if not len(starts) or len(mine) - starts[-1] != len(self._calls) + 1:
            return None         # the ring wrapped meanwhile (another thread's runs)
        return mine[starts[-1]:, 0].copy()

    def run_in_python(self):
        """Makes every call from Python in order, the pool held (`run` without the
        pool's library; a per-call reference for the native walk)."""
        threadpool.hold()
        try:
            for call in self._calls:
                call()
        finally:
            threadpool.release()

    def _stopped(self, walk, status):
        """After the walk stopped at an entry: makes that call from Python, or raises its
        failure, and resumes after it."""
        at = self._at
        try:
            while status:
                i = at[0]
                call = self._calls[i]
                if status == PYTHON:
                    call()
                elif status == FAILED:
                    call.failed(at[2])
                else:
                    call.finish()       # RECORDED: raises the record's BoundsError
                at[0], at[1] = i + 1, at[1] + len(self._entries[i])
                if i + 1 == len(self._calls):
                    at[0] = at[1] = 0
                    return
                status = walk(*self._args)
        except BaseException:
            at[0] = at[1] = 0       # the next run starts at the beginning
            raise
