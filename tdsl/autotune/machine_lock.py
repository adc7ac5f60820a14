"""One timing at a time per machine, however many measuring processes it runs.

Two Dask workers on one host, a `ThreadPoolExecutor`, or `n_parallel=2` all put several
measuring processes on the same cores; a parallel kernel timed while another process
compiles or times runs on fewer cores than it thinks and is misjudged. So measuring
processes share a readers-writer lock on a file beside the compile cache (`~/.cache/tdsl`,
or `TDSL_CACHE_DIR`: a lasting place, not the temp folder): building, the first
run and the reference computation hold it shared (they may overlap each other), timing
holds it exclusively (nothing else measuring on this machine runs meanwhile).

`flock` locks belong to an open file, so each process opens its own (a forked child
reopens rather than sharing its parent's lock), and the kernel drops them when a process
dies: a crashed or killed measuring process never leaves the machine locked. A gate file
in front of the lock gives waiting timers priority over new builds, so a stream of builds
cannot starve them. Where `fcntl` does not exist (Windows) the lock does nothing.
"""
from __future__ import annotations

import contextlib
import os
import time

try:
    import fcntl
except ImportError:       # pragma: no cover - Windows
    fcntl = None


def _acquire(fd, mode, deadline) -> bool:
    """flock with a deadline (None: wait as long as it takes); False when it ran out."""
    if deadline is None:
        fcntl.flock(fd, mode)
        return True
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


class MachineLock:
    """`shared()` / `exclusive()` take `max_wait` seconds: a process that waited that long
    (another one hangs while holding the lock, until its own time limit kills it) goes on
    without the lock rather than time out itself; its timing may then be disturbed, which
    only makes a config look slower, never wrongly fast."""

    def __init__(self, path=None):
        uid = os.getuid() if hasattr(os, "getuid") else 0
        if path is None:
            from ..runtime import diskcache
            path = os.path.join(os.path.dirname(diskcache.directory()), f"measure-{uid}.lock")
        self.path = path
        self._pid = None
        self._fds = None

    def _open(self):
        if self._pid != os.getpid():          # new process: own open files, own locks
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._fds = tuple(os.open(p, os.O_RDWR | os.O_CREAT, 0o666)
                              for p in (self.path + ".gate", self.path))
            self._pid = os.getpid()
        return self._fds

    @contextlib.contextmanager
    def shared(self, max_wait=None):
        """Building and checking: other builds may run, no timing does."""
        if fcntl is None:
            yield
            return
        gate, main = self._open()
        deadline = None if max_wait is None else time.monotonic() + max_wait
        gated = _acquire(gate, fcntl.LOCK_EX, deadline)   # queue behind a waiting timer
        try:
            held = _acquire(main, fcntl.LOCK_SH, deadline)
        finally:
            if gated:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            if held:
                fcntl.flock(main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self, max_wait=None):
        """Timing: nothing else measuring on this machine runs."""
        if fcntl is None:
            yield
            return
        gate, main = self._open()
        deadline = None if max_wait is None else time.monotonic() + max_wait
        gated = _acquire(gate, fcntl.LOCK_EX, deadline)   # new builds wait from now on
        try:
            held = _acquire(main, fcntl.LOCK_EX, deadline)  # ... and running ones finish
            try:
                yield
            finally:
                if held:
                    fcntl.flock(main, fcntl.LOCK_UN)
        finally:
            if gated:
                fcntl.flock(gate, fcntl.LOCK_UN)


LOCK = MachineLock()
