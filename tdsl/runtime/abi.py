"""The C calling convention of generated entry points, shared by every CPU backend (the
JIT, loaded libraries, the "c" target): one pointer per buffer, `double` for float scalars,
`int64_t` for integer scalars, an `int32_t` status as the result, and the parallel width
read from `int32_t __tdsl_num_threads`."""
from __future__ import annotations

import ctypes
import os

from .. import dtype as dt


def ctypes_signature(sig):
    """ctypes function type of the generated entry point for a signature dict."""
    types = []
    for p in sig["params"]:
        if p["kind"] == "buffer":
            types.append(ctypes.c_void_p)
        elif dt.is_float(p["dtype"]):
            types.append(ctypes.c_double)
        else:
            types.append(ctypes.c_int64)
    return ctypes.CFUNCTYPE(ctypes.c_int32, *types)


def default_num_threads() -> int:
    """TDSL_NUM_THREADS when it is a positive integer, else the number of CPUs."""
    env = os.environ.get("TDSL_NUM_THREADS")
    if env:
        try:
            n = int(env)
            if n >= 1:
                return n
        except ValueError:
            pass
    return max(1, os.cpu_count() or 1)
