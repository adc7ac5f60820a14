"""GPU kernels emulated on the CPU: the runtime for target "c" on schedules that bind
loops to blockIdx/threadIdx. The kernels come from `CGPUEmuPrinter` (blocks in sequence,
the threads of a block as fibers switched at barriers) and are compiled by the system C
compiler; memory is host memory. It checks the semantics of GPU schedules (shared memory,
barriers, cross-thread reductions) on any machine; it is not fast."""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import time

import numpy as np

from ..errors import BuildError

_libs = {}
_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double, "int8": ctypes.c_int8,
           "int16": ctypes.c_int16, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
           "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32,
           "uint64": ctypes.c_uint64, "bool": ctypes.c_uint8}


class _Mem:
    def __init__(self, nbytes):
        self.array = np.zeros(max(int(nbytes), 8), np.uint8)
        self.ptr = self.array.ctypes.data


class EmuDevice:
    kind = "c"
    name = "GPU emulation on the host CPU"

    def alloc(self, nbytes):
        return _Mem(nbytes)

    def copy_in(self, mem, array):
        a = np.ascontiguousarray(array)
        ctypes.memmove(mem.ptr, a.ctypes.data, a.nbytes)

    def copy_out(self, mem, array):
        ctypes.memmove(array.ctypes.data, mem.ptr, array.nbytes)

    def span(self, mem, nbytes):
        return ("host", mem.ptr, mem.ptr + nbytes)

    def load(self, source, names):
        fns = _libs.get(source)
        if fns is None:
            from .aot import _compiler
            key = hashlib.sha256(source.encode()).hexdigest()[:24]
            d = tempfile.mkdtemp(prefix="tdsl_emu_")
            src = os.path.join(d, "kernels.c")
            path = os.path.join(d, f"kernels_{key}.so")
            with open(src, "w") as f:
                f.write(source)
            r = subprocess.run([_compiler(), "-O1", "-std=gnu11", "-shared", "-fPIC", "-o", path,
                                src, "-lm"], capture_output=True, text=True)
            if r.returncode != 0:
                raise BuildError(f"the C compiler rejected the emulated kernels:\n{r.stderr}\n"
                                 f"--- source ---\n{source}")
            lib = ctypes.CDLL(path)
            fns = {"__lib__": lib}
            for n in names:
                fn = getattr(lib, n + "_launch")
                fn.restype = ctypes.c_int32
                fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
                fns[n] = fn
            _libs[source] = fns
        return fns

    def scalar(self, value, dtype):
        return _CTYPES[dtype](value)

    def launch(self, fn, grid, block, args):
        argv = (ctypes.c_void_p * max(len(args), 1))()
        for i, a in enumerate(args):
            argv[i] = a.ptr if isinstance(a, _Mem) else ctypes.addressof(a)
        g = (ctypes.c_int64 * 3)(*grid)
        b = (ctypes.c_int64 * 3)(*block)
        rc = fn(argv, g, b)
        if rc:
            raise BuildError("the emulated kernel could not allocate its thread stacks")
        return None

    def sync(self):
        pass

    def time(self, run, number):
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        return (time.perf_counter() - t0) / number


_device = None


def get_device():
    global _device
    if _device is None:
        _device = EmuDevice()
    return _device
