"""`DeviceModule`: a GPU build (CUDA or OpenCL) called like a CPU `Module`.

The host side is Python: arguments are checked by the same `Signature` as CPU modules
(count, dtypes, ranks, shapes, symbolic sizes, overlap of written buffers); numpy arrays
are copied to the device and written ones copied back, `tdsl.nd` arrays of the module's
device are used in place; intermediate buffers between kernels are allocated for the call;
then the kernels are launched in order, with grid sizes evaluated from the sizes bound at
call time.
"""
from __future__ import annotations

from typing import List

import numpy as np

from .. import dtype as dt
from ..errors import ArgumentError, BuildError, TdslError
from ..ir import expr as E
from ..ir import stmt as S
from ..target_kind import kind_of
from .launches import LaunchSequence
from .module import ProfileResult
from .signature import Signature


def eval_int(e, env):
    """Value of an integer expression over Vars bound in `env`."""
    t = type(e)
    if t is E.IntImm:
        return e.value
    if t is E.Var:
        if e not in env:
            raise BuildError(f"the launch size depends on '{e.name}', which is not an argument")
        return env[e]
    if t is E.Cast:
        return eval_int(e.value, env)
    ops = {E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
           E.FloorDiv: lambda a, b: a // b, E.FloorMod: lambda a, b: a % b, E.Min: min,
           E.Max: max}
    f = ops.get(t)
    if f is None:
        raise BuildError(f"cannot evaluate the launch size {e} on the host")
    return f(eval_int(e.a, env), eval_int(e.b, env))


class DeviceModule:
    """A built GPU function: `mod(*args)`, `get_source()`, `time_evaluator()`."""

    def __init__(self, func: S.PrimFunc, target: str, source: str, signature: dict):
        self.signature = Signature(signature)
        self.target = target
        self.source = source
        self.kernels = list(func.attrs["kernels"])
        self.host_buffers = list(func.attrs.get("host_buffers", []))
        self.params = list(func.params)
        self._index = {p: i for i, p in enumerate(self.params)}
        self.notes: List[str] = []

    # properties ---------------------------------------------------------------------
    @property
    def name(self):
        return self.signature.name

    @property
    def type_key(self):
        return self.target

    @property
    def imported_modules(self):
        """TVM's host module imports its device module, whose source TVM code reads as
        `f.imported_modules[0].get_source()`; here one module is both."""
        return [self]

    @property
    def device(self):
        from .ndarray import Device
        return Device(kind_of(self.target).device, 0)

    def __repr__(self):
        ks = ", ".join(k.name for k in self.kernels)
        return f"<tdsl.DeviceModule {self.name} [{self.target}] kernels: {ks}>"

    def _repr_html_(self):
        from .display import module_html
        return module_html(self)

    def _repr_markdown_(self):
        from .display import module_markdown
        return module_markdown(self)

    def get_source(self, fmt: str = ""):
        """The CUDA or OpenCL C source ('' / 'cu' / 'cl'); 'ptx' gives the PTX from NVRTC."""
        if fmt in ("", "cu", "cuda", "cl", "opencl", "c", "source"):
            return self.source
        if fmt == "ptx":
            if self.target != "cuda":
                raise TdslError("get_source('ptx') is for target 'cuda'")
            from .cuda import compile_ptx
            return compile_ptx(self.source)
        raise TdslError(f"get_source: unknown format {fmt!r} for target {self.target!r}; use '' "
                        "or 'ptx'")

    def save(self, path, fmt: str = ""):
        """Writes the kernel source (`.cu`, `.cl`, `.c`) or, for CUDA, its PTX (`.ptx`)."""
        path = str(path)
        fmt = fmt or path.rsplit(".", 1)[-1]
        if fmt not in ("cu", "cl", "c", "ptx"):
            raise TdslError(f"save({path!r}): a {self.target} module saves its source (.cu, .cl, "
                            ".c) or PTX (.ptx)")
        from .libfile import write_atomic
        write_atomic(path, self.get_source("ptx" if fmt == "ptx" else "").encode())
        return path

    def export_library(self, path):
        raise TdslError(f"export_library is for CPU modules; a {self.target} module keeps its "
                        "source (get_source()) instead")

    # calling ------------------------------------------------------------------------
    def _api(self):
        if kind_of(self.target).emulates_gpu:
            from .emu import get_device
            return get_device()
        return self.device.api()

    def _convert(self, api):
        from .ndarray import NDArray
        dev = self.device

        def convert(a, p, i, sig):
            if isinstance(a, NDArray):
                if a.host is not None:
                    a = a.host
                elif a.device != dev:
                    raise sig.error(i, f"is on {a.device}, the module runs on {dev}; copy it "
                                      "with tdsl.nd.array(x.numpy(), device)")
                else:
                    if a.dtype != sig.np_dtypes[i] and not dt.accepts(p["dtype"], a.dtype):
                        raise sig.error(i, f"expected dtype {p['dtype']}, got {a.dtype}")
                    return a, None
            from .signature import host_array
            return host_array(a, p, i, sig)
        return convert

    def _setup(self, args, in_place=False):
        """Binds `args`: (api, launches, copy_back, writebacks, handles, checks). `in_place`: host
        arrays are used as device memory, never copied (target "c", whose memory is host
        memory; `prepared` refuses them on a GPU)."""
        api = self._api()
        from .ndarray import NDArray
        sig = self.signature
        values, arrays, writebacks = sig.bind(args, self._convert(api))
        if in_place:
            for i, (a, arr) in enumerate(zip(args, arrays)):
                if arr is None or isinstance(arr, NDArray):
                    continue
                if not hasattr(api, "wrap"):
                    raise ArgumentError(f"{self.name}: prepared launches on {self.target} take "
                                        "device arrays (tdsl.nd.array(x, device)), got a host array "
                                        f"for argument {i}")
                src = a.host if isinstance(a, NDArray) else a
                if not isinstance(src, np.ndarray) or arr.ctypes.data != src.ctypes.data:
                    raise ArgumentError(f"{self.name}: argument {i} of a prepared launch must be a "
                                        "contiguous array of the parameter's dtype (it is used in place)")

        def span(arr):
            if isinstance(arr, NDArray):
                return api.span(arr.handle, arr.nbytes)
            start = arr.__array_interface__["data"][0]
            return ("host", start, start + arr.nbytes)
        sig.check_overlap(arrays, span)
        env = {}
        for i, p in enumerate(self.params):
            if isinstance(p, E.Var):
                env[p] = values[i]
        handles = {}
        copy_back, checks = [], []
        for i, p in enumerate(self.params):
            arr = arrays[i]
            if arr is None:
                continue
            if isinstance(arr, NDArray):
                handles[p] = arr.handle
            elif in_place:
                handles[p] = api.wrap(arr)
            else:
                mem = api.alloc(arr.nbytes)
                if arr.nbytes:
                    api.copy_in(mem, arr)
                handles[p] = mem
                if sig.params[i]["written"]:
                    copy_back.append((mem, arr))
        rec = sig.new_record()
        if rec is not None:     # checked accesses (tdsl.passes.bounds_check): their record
            mem = handles[self.params[sig.record]] = api.alloc(rec.nbytes)
            api.copy_in(mem, rec)
            if in_place:        # ... is read back by the prepared sequence's check()
                checks.append(lambda: _check_device_record(api, sig, mem, rec))
            else:               # ... comes back like an output
                copy_back.append((mem, rec))
                writebacks = writebacks + [lambda: sig.check_record(rec)]
        for b in self.host_buffers:
            n = 1
            for d in b.shape:
                n *= eval_int(d, env)
            handles[b] = api.alloc(max(n, 1) * dt.to_numpy(b.dtype if b.dtype != "bool" else "uint8").itemsize)
        fns = api.load(self.source, {k.name: k.dynamic_shared_bytes for k in self.kernels})
        launches = []
        for k in self.kernels:
            grid = [eval_int(g, env) for g in k.grid]
            if min(grid) <= 0:
                continue
            kargs = []
            for p in k.params:
                if isinstance(p, S.Buffer):
                    kargs.append(handles[p])
                else:
                    kargs.append(api.scalar(env[p], p.dtype))
            launches.append((fns[k.name], grid, k.block, kargs, k.dynamic_shared_bytes))
        return api, launches, copy_back, writebacks, handles, checks

    @staticmethod
    def _run(api, launches):
        return [api.launch(fn, grid, block, kargs, shared=shared)
                for fn, grid, block, kargs, shared in launches]

    def __call__(self, *args):
        api, launches, copy_back, writebacks, handles, _ = self._setup(args)
        self._run(api, launches)
        for mem, arr in copy_back:
            api.copy_out(mem, arr)
        api.sync()
        for wb in writebacks:
            wb()

    def prepared(self, *args, stream=None) -> LaunchSequence:
        """Binds `args` once (device arrays of this module's device, used in place; host
        arrays too for target "c") and returns the launches as a `LaunchSequence`: calling
        it queues every kernel on `stream` (None: the device's default queue) with no
        argument checks, no allocation and no copy, and does not wait (`.sync()`).
        Buffers between this module's kernels are allocated here, once.

        Threads: one sequence writes fixed buffers, so two threads must not run the same
        one at once; make one per thread (as the graph executor makes one per run state)."""
        api, launches, copy_back, writebacks, handles, checks = self._setup(args, in_place=True)
        if copy_back or writebacks:
            raise ArgumentError(f"{self.name}: a prepared launch cannot stage its arguments")
        runs = [api.prepare(fn, grid, block, kargs, stream, shared=shared)
                for fn, grid, block, kargs, shared in launches]
        return LaunchSequence(api, stream, runs, keep=[args, handles], checks=checks)

    def time_evaluator(self, number=10, repeat=3, min_repeat_ms=0):
        """f(*args) -> ProfileResult: device time per run (all kernels), from device events
        (CUDA events, OpenCL profiling events); arguments are copied once, not timed."""
        if number < 1 or repeat < 1:
            raise ValueError("number and repeat must be at least 1")

        def evaluate(*args):
            api, launches, copy_back, writebacks, handles, _ = self._setup(args)
            self._run(api, launches)  # warm-up
            api.sync()
            results = []
            for _ in range(repeat):
                n = number
                while True:
                    t = api.time(lambda: self._run(api, launches), n)
                    if t * n * 1000 >= min_repeat_ms or n >= 1 << 20:
                        break
                    n *= 2
                results.append(t)
            for mem, arr in copy_back:
                api.copy_out(mem, arr)
            api.sync()
            for wb in writebacks:
                wb()
            return ProfileResult(results)
        return evaluate


def _check_device_record(api, sig, mem, rec):
    """Raises BoundsError for what the kernels recorded in device record `mem` since the
    last check, and clears it there (a sequence runs again on the same record)."""
    api.copy_out(mem, rec)
    if rec[0]:
        failed = rec.copy()
        rec[:] = 0
        api.copy_in(mem, rec)
        sig.check_record(failed)
