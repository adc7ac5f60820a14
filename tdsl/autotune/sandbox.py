"""A measuring process: runs `measure.run_job` on jobs sent through a pipe, so a candidate
that segfaults or hangs ends that process, never the caller.

The caller owns the child outright (its pid, both pipe ends), so a crash is read from the
exit status with one `waitpid` that nobody else races for (a `ProcessPoolExecutor` reaps
its workers in a manager thread, and the status was seen lost to that race), and a hang is
ended by killing that one process, disturbing no other trial.

Two ways to start one:

- `"fork"` (the tuning session's own measuring processes): the child inherits the
  templates, reference functions and task data of the session (`measure.PAYLOADS`), so
  nothing is pickled but a small job; templates written in a notebook just work.
- `"exec"` (inside executor workers: Dask and Ray workers are often daemonic processes,
  which `multiprocessing` forbids to have children, and are multi-threaded, which makes
  forking them unsafe): a fresh interpreter running `_main`, given the caller's
  `sys.path`; jobs then carry their task as pickled bytes.

A child that outlives its parent (a worker killed mid-trial) notices within a second and
exits, so no orphan keeps a core busy.
"""
from __future__ import annotations

import gc
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection, wait as wait_ready
from typing import Optional

# parent-side pipe ends of live sandboxes: a forked child closes them, so that closing a
# sandbox's pipe really tells its child to stop
_PARENT_FDS: set = set()


def describe_exit(code) -> str:
    if code is None:
        return "the measuring process died"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the measuring process was killed by {name}"
    return f"the measuring process exited with code {code}"


def _child_setup():
    """Ctrl-C is for the tuning session; a crash is reported by the exit status (not by a
    faulthandler dump inherited from pytest or the user); the child ends with its parent."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
    try:
        import faulthandler
        faulthandler.disable()
    except Exception:
        pass
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="tdsl-sandbox-watchdog").start()


def _serve(conn_in: Connection, conn_out: Connection):
    from .measure import run_job
    while True:
        try:
            job = pickle.loads(conn_in.recv_bytes())
        except EOFError:
            return
        try:
            res = run_job(job)
        except BaseException as e:       # run_job classifies; this is a bug of ours
            res = {"status": "runner_error", "error": f"{type(e).__name__}: {e}"}
        conn_out.send_bytes(pickle.dumps(res))


def _main():
    """Entry point of an "exec" sandbox: `python -c ... <read fd> <write fd>`."""
    conn_in = Connection(int(sys.argv[1]), writable=False)
    conn_out = Connection(int(sys.argv[2]), readable=False)
    _child_setup()
    try:
        sys.path[:] = pickle.loads(conn_in.recv_bytes())
    except EOFError:
        return
    from .measure import warm_up
    warm_up()
    conn_out.send_bytes(b"ready")     # starting is not part of the first trial's time
    _serve(conn_in, conn_out)


class Sandbox:
    """One measuring process, started on first use and again after it crashed, hung or
    ran `recycle_every` jobs (which bounds the memory of compiled kernels it keeps)."""

    START_S = 120.0        # an "exec" child imports tdsl and builds a first kernel

    def __init__(self, start: str = "fork", recycle_every: int = 200, env=None):
        if start == "fork" and not hasattr(os, "fork"):
            start = "exec"
        self.start = start
        self.recycle_every = recycle_every
        self.env = env                    # of an "exec" child (default: ours)
        self.pid: Optional[int] = None
        self._proc: Optional[subprocess.Popen] = None
        self._send: Optional[Connection] = None
        self.conn: Optional[Connection] = None      # results come from here (wait on it)
        self._jobs = 0
        self.job = None                             # the job being measured, or None
        self.started_at = 0.0

    # -- process ---------------------------------------------------------------------
    def _launch(self):
        r_job, w_job = os.pipe()
        r_res, w_res = os.pipe()
        if self.start == "fork":
            from .measure import warm_up
            warm_up()                    # children start with LLVM and the caches ready
            # The child's collections would touch every object of the parent's heap, a
            # copy-on-write fault per page: 1.2 s for 5M objects, past a trial's time limit
            # in a test process that has loaded networks. Frozen, the child never scans them.
            pid, frozen_before = -1, gc.get_freeze_count()
            gc.freeze()
            try:
                pid = os.fork()
            finally:
                if pid != 0 and not frozen_before:     # a caller's own freeze stays theirs
                    gc.unfreeze()
            if pid == 0:                 # the child: serve, never return into the caller
                try:
                    for fd in list(_PARENT_FDS) + [w_job, r_res]:
                        try:
                            os.close(fd)
                        except OSError:
                            pass
                    _child_setup()
                    _serve(Connection(r_job, writable=False), Connection(w_res, readable=False))
                finally:
                    os._exit(0)
            self.pid = pid
        else:
            import tdsl
            root = os.path.dirname(os.path.dirname(os.path.abspath(tdsl.__file__)))
            env = dict(self.env if self.env is not None else os.environ)
            env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in
                                                          env.get("PYTHONPATH", "").split(os.pathsep) if p])
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from tdsl.autotune.sandbox import _main; _main()",
                 str(r_job), str(w_res)], pass_fds=(r_job, w_res), env=env,
                stdin=subprocess.DEVNULL)
            self.pid = self._proc.pid
        os.close(r_job)
        os.close(w_res)
        self._send = Connection(w_job, readable=False)
        self.conn = Connection(r_res, writable=False)
        _PARENT_FDS.update((w_job, r_res))
        self._jobs = 0
        if self.start == "exec":
            self._send.send_bytes(pickle.dumps(list(sys.path)))
            try:
                # a starting interpreter is busy: no timing on this machine meanwhile
                from .machine_lock import LOCK
                with LOCK.shared(self.START_S / 4):
                    if not self.conn.poll(self.START_S):
                        raise EOFError
                    self.conn.recv_bytes()
            except (EOFError, OSError):
                code = self._reap(block=False)
                self.kill()
                raise RuntimeError(f"the measuring process did not start within "
                                   f"{self.START_S:.0f} s ({describe_exit(code)})") from None

    def _reap(self, block=True) -> Optional[int]:
        """The exit status of the child (None while it runs and block is False)."""
        if self.pid is None:
            return None
        if self._proc is not None:
            return self._proc.wait() if block else self._proc.poll()
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return None
        if pid == 0:
            return None
        return os.waitstatus_to_exitcode(status)

    def _drop(self):
        for c in (self._send, self.conn):
            if c is not None:
                _PARENT_FDS.discard(c.fileno())
                c.close()
        self._send = self.conn = None
        self.pid = self._proc = None
        self.job = None

    def kill(self):
        """Ends the child now (a hung candidate); the next job starts a new one."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()
        self._drop()

    def close(self, timeout: float = 5.0):
        """Lets the child finish and exit (closing its pipe tells it to), else kills it."""
        if self.pid is None:
            return
        if self.job is not None:
            self.kill()
            return
        if self._send is not None:
            _PARENT_FDS.discard(self._send.fileno())
            self._send.close()
            self._send = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._reap(block=False) is not None:
                self._drop()
                return
            time.sleep(0.01)
        self.kill()

    # -- jobs ------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.job is not None

    def submit(self, job):
        if self.busy:
            raise RuntimeError("this sandbox is measuring a job already")
        if self.pid is not None:
            if self._reap(block=False) is not None:
                self._drop()              # died while idle (reaped just now)
            elif self._jobs >= self.recycle_every:
                self.close()
        data = pickle.dumps(job)          # fails here (in the caller) if the job cannot travel
        for attempt in (0, 1):
            if self.pid is None:
                self._launch()
            try:
                self._send.send_bytes(data)
                break
            except OSError:               # died since: once more with a new one
                self.kill()
                if attempt:
                    raise
        self._jobs += 1
        self.job = job
        self.started_at = time.monotonic()

    def collect(self) -> dict:
        """The result of the job, once `conn` is readable: the child's answer, or how the
        child died."""
        try:
            res = pickle.loads(self.conn.recv_bytes())
            self.job = None
            return res
        except (EOFError, OSError):
            code = self._reap()
            self._drop()
            return {"status": "crash", "error": describe_exit(code)}

    def timed_out(self, limit: float) -> dict:
        self.kill()
        return {"status": "timeout", "error": f"no result after {limit:.1f} s"}

    def run(self, job, timeout: float) -> dict:
        """Measures `job` and waits for it: its result, a crash or a time-out."""
        self.submit(job)
        if wait_ready([self.conn], timeout=max(0.0, timeout)):
            return self.collect()
        return self.timed_out(timeout)
