"""`Module`: a compiled kernel that checks its arguments, then calls native code.

A module has a *signature* (a JSON-able dict made by the code generator and embedded in
exported libraries) and a *backend* that owns the native function
(`tdsl.codegen.llvm.jit.JITBackend` for the JIT, `aot.SharedLibBackend` for a loaded `.so`).

The signature and the argument checks live in `signature.py`.

Unaligned arrays (an address that is not a multiple of the element size: `np.frombuffer`
at an odd offset, a slice of a network or file buffer) are valid numpy, and numpy's own
functions accept them by staging them through aligned buffers. So does a module: such an
argument is copied to an aligned buffer before each call and, when the kernel writes it,
copied back after it. The generated code keeps its aligned loads and stores, and the copy
costs only the (rare) callers who pass such arrays. GPU modules copy every host array to
the device anyway, where the same holds without a copy.
"""
from __future__ import annotations

import ctypes
import time
from typing import List

import numpy as np

from ..errors import BuildError, TdslError
from .signature import Signature

def failure(name, rc, sig=None) -> str:
    """The message for a kernel that returned `rc`."""
    from . import extern
    if rc == extern.EXTERN_FAILED:
        called = ", ".join(repr(n) for n in (sig or {}).get("externs", ()))
        return f"kernel {name} failed: " + extern.take_error(
            f"an extern function ({called}) returned a non-zero status")
    return f"kernel {name} failed (code {rc}): a heap allocation inside the kernel failed"


class ProfileResult:
    """Timing of a kernel: `mean` seconds per run over all repeats, `results` the mean of
    each repeat."""

    def __init__(self, results):
        self.results = tuple(results)
        self.mean = sum(self.results) / len(self.results)
        self.min = min(self.results)
        self.max = max(self.results)
        srt = sorted(self.results)
        self.median = srt[len(srt) // 2]
        self.std = float(np.std(self.results))

    def __repr__(self):
        return (f"ProfileResult(mean={self.mean:.6g}s, min={self.min:.6g}s, "
                f"repeats={len(self.results)})")


class Module:
    """A built kernel. Call it with numpy arrays (and Python scalars for scalar params)."""

    def __init__(self, signature, backend):
        self.signature = signature if isinstance(signature, Signature) else Signature(signature)
        self._backend = backend
        self._cfunc = backend.cfunc
        self.notes: List[str] = []

    # properties ---------------------------------------------------------------------
    @property
    def name(self):
        return self.signature.name

    @property
    def entry_name(self):
        return self.signature.symbol

    @property
    def backend(self):
        """What runs the kernel: code compiled in this process, a loaded library, a device
        module."""
        return self._backend

    @property
    def type_key(self):
        return self._backend.kind

    def __repr__(self):
        params = ", ".join(f"{p['name']}: {p['dtype']}" + (
            f"[{', '.join(p.get('shape_text') or map(str, p['shape']))}]"
            if p["kind"] == "buffer" else "")
            for p in self.signature.params[:self.signature.num_user_args])
        return f"<tdsl.Module {self.name}({params}) [{self._backend.kind}]>"

    def _repr_html_(self):
        from .display import module_html
        return module_html(self)

    def _repr_markdown_(self):
        from .display import module_markdown
        return module_markdown(self)

    # calling ------------------------------------------------------------------------
    def __call__(self, *args):
        cargs, keep, before, after = self.signature.prepare(args)
        for copy in before:
            copy()
        rc = self._cfunc(*cargs)
        if rc:
            raise TdslError(failure(self.name, rc, self.signature.raw))
        for copy in after:
            copy()
        del keep

    def prepared(self, *args):
        """Checks `args` once and returns a no-argument callable (`PreparedCall`) that runs
        the kernel on them, for callers that run the same buffers many times (a graph
        executor): the per-call checks (~0.6 us a buffer for exact arrays, ~10 us
        otherwise) are skipped. The arrays must stay alive and unchanged.

        Threads: the callable writes the fixed output arrays (and staging copies of any
        unaligned ones), so two threads calling the same prepared callable race on them;
        different prepared callables on different arrays, and plain calls, may run from
        several threads at once (the kernel runs without the GIL; a parallel loop that
        finds the worker pool busy with another thread's loop runs on its own thread,
        see threadpool.c)."""
        cargs, keep, before, after = self.signature.prepare(args)
        return PreparedCall(self._cfunc, cargs, keep, before, after, self.name, self.signature)

    def set_num_threads(self, n: int):
        """Threads used by parallel loops of this module (default: TDSL_NUM_THREADS or
        os.cpu_count())."""
        if int(n) < 1:
            raise ValueError("the number of threads must be at least 1")
        self._backend.set_num_threads(int(n))

    def get_num_threads(self) -> int:
        return self._backend.get_num_threads()

    def time_evaluator(self, number=10, repeat=3, min_repeat_ms=0, warmup_ms=100):
        """Returns f(*args) -> ProfileResult: `repeat` times, the mean over `number` runs.

        The kernel first runs for at least `warmup_ms` (at least once): caches and clocks
        settle, and so do other thread pools of the process (OpenBLAS's workers spin for
        ~0.1 s after a numpy matmul and would take a core from a parallel kernel)."""
        if number < 1 or repeat < 1:
            raise ValueError("number and repeat must be at least 1")

        def evaluate(*args):
            cargs, keep, before, after = self.signature.prepare(args)
            for copy in before:
                copy()
            fn = self._cfunc
            t_end = time.perf_counter() + warmup_ms / 1000.0
            while True:
                rc = fn(*cargs)
                if rc:
                    raise TdslError(failure(self.name, rc, self.signature.raw))
                if time.perf_counter() >= t_end:
                    break
            results = []
            for _ in range(repeat):
                n = number
                while True:
                    t0 = time.perf_counter()
                    for _ in range(n):
                        fn(*cargs)
                    el = time.perf_counter() - t0
                    if el * 1000 >= min_repeat_ms or n >= 1 << 30:
                        break
                    n *= 2
                results.append(el / n)
            for copy in after:
                copy()
            del keep
            return ProfileResult(results)
        return evaluate

    # source and export ------------------------------------------------------------------
    def get_source(self, fmt: str = ""):
        """The generated code: optimised LLVM IR ('' or 'll') or assembly ('asm')."""
        return self._backend.source(fmt)

    def export_library(self, path: str):
        """Writes a self-describing shared library loadable by `tdsl.load_module`
        (a path ending in `.o` gets the bare object file instead)."""
        self._check_portable(path)
        self._backend.export(str(path), self.signature.raw)
        return str(path)

    def _check_portable(self, path):
        names = self.signature.raw.get("externs")
        if names:   # their addresses exist only in this process
            raise BuildError(f"cannot write {str(path)!r}: the module calls the extern functions "
                             f"{', '.join(names)}, registered in this process only")

    def save(self, path, fmt: str = ""):
        """Writes the module's code by the file's suffix (or `fmt`): `.o` the
        position-independent object file (link it with `tdsl.contrib.cc.create_shared`),
        `.ll` the optimised LLVM IR, `.s` the assembly."""
        path = str(path)
        if not fmt:
            base = path.replace("\\", "/").rsplit("/", 1)[-1]
            fmt = base.rsplit(".", 1)[-1] if "." in base else ""
        if fmt == "o":
            if not path.endswith(".o"):
                raise BuildError(f"save({path!r}, 'o'): name an object file with the suffix .o")
            self._check_portable(path)
            self._backend.export(path, self.signature.raw)
        elif fmt in ("ll", "s"):
            from .libfile import write_atomic
            write_atomic(path, self.get_source("ll" if fmt == "ll" else "asm").encode())
        else:
            raise BuildError(f"save({path!r}): unknown format {fmt!r}; use a path ending in .o, "
                             ".ll or .s")
        return path


class PreparedCall:
    """A kernel bound to fixed arguments (`Module.prepared`): calling it runs the kernel
    and raises what a plain call raises. `native` is what a caller needs to run it from
    native code instead (callseq.CallSequence: a host run's kernels in one ctypes call):
    (function address, argument words, bounds record address or 0), or None where the call
    needs Python around it (staging copies of unaligned arrays, a float scalar, a backend
    without a native function). A native caller reports a failure through `failed` and a
    set bounds record through `finish`, so that both paths raise the same errors."""

    __slots__ = ("fn", "cargs", "keep", "before", "after", "name", "raw", "native")

    def __init__(self, fn, cargs, keep, before, after, name, signature):
        self.fn, self.keep, self.before, self.after = fn, keep, before, after
        self.name, self.raw = name, signature.raw
        self.native = _native(fn, cargs, before, after, signature)
        types = getattr(fn, "argtypes", None)
        if types and len(types) == len(cargs):
            # converted once: ctypes takes its own objects faster than Python ints (a
            # network of small kernels calls each once per run)
            cargs = [t(v) for t, v in zip(types, cargs)]
        self.cargs = cargs

    def __call__(self):
        for copy in self.before:
            copy()
        rc = self.fn(*self.cargs)
        if rc:
            self.failed(rc)
        for copy in self.after:
            copy()

    def failed(self, rc):
        """Raises the error of the kernel's nonzero return `rc`."""
        raise TdslError(failure(self.name, rc, self.raw))

    def finish(self):
        """What runs after the kernel returned: the bounds record's check (BoundsError)."""
        for copy in self.after:
            copy()


def _native(fn, cargs, before, after, signature):
    """PreparedCall.native: a call whose every argument is an integer word (a pointer or an
    int64 scalar, abi.py), with no copy around it but the bounds record's check."""
    record = signature.record
    if before or len(after) != (record is not None):
        return None
    if any(type(v) is not int for v in cargs) or any(signature.float_scalar):
        return None
    try:
        address = ctypes.cast(fn, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):     # not a native function (a compile-only backend)
        return None
    if not address:
        return None
    return address, tuple(cargs), 0 if record is None else cargs[record]
