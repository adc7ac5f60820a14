"""The registry of functions that `tdsl.extern` stages call (`tdsl.register_func`), and
the C ABI generated code calls them through.

Every registered function is called as

    int32_t f(const tdsl_arg *args, int32_t nargs);     /* 0: success */
    typedef struct { void *data; const int64_t *shape; int32_t ndim; int32_t dtype; } tdsl_arg;

an array argument has `ndim` >= 1 sizes in `shape` and `data` at its first element
(row-major, contiguous); a scalar has `ndim` -1 and `data` at an int64 (integers, bools)
or a double (floats). `dtype` indexes `tdsl.dtype.DTYPES`.

A registration is a Python callable (called through a ctypes callback with numpy views of
the arrays and Python numbers: for prototyping; it takes the GIL), a C symbol of that ABI
(in a shared library or in the process), or a shipped function (`SHIPPED`: found on first
use). Each registration gets its own linker symbol, `tdsl_ext_<name>_<n>`, which the JIT
resolves through `llvm.add_symbol`: a module built before a name is registered again keeps
calling the function it was built with. Registrations are never dropped, so no module can
call a collected ctypes callback.
"""
from __future__ import annotations

import ctypes
import re
import threading
import traceback
from typing import Dict, List

import numpy as np

from .. import dtype as dt
from ..errors import BuildError, TdslError


class TdslArg(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("ndim", ctypes.c_int32), ("dtype", ctypes.c_int32)]


CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(TdslArg), ctypes.c_int32)
DTYPE_CODES = {name: k for k, name in enumerate(dt.DTYPES)}
# a kernel returns this when a call failed; the message is in `take_error()`
EXTERN_FAILED = 2


class Entry:
    """One registration: `address` is what `symbol` resolves to; `keep` holds what must
    outlive every module that calls it (the ctypes callback, the library handle)."""

    def __init__(self, name, symbol, address, keep, what):
        self.name = name
        self.symbol = symbol
        self.address = address
        self.keep = keep
        self.what = what

    def __repr__(self):
        return f"<extern {self.name!r}: {self.what}>"


_lock = threading.Lock()
_current: Dict[str, Entry] = {}
_all: List[Entry] = []
_errors = threading.local()


def _fail(message):
    if not getattr(_errors, "message", None):   # the first failure explains the rest
        _errors.message = message
    return 1


def take_error(default="") -> str:
    """The message of the last failed call on this thread (and forgets it)."""
    msg = getattr(_errors, "message", None) or default
    _errors.message = None
    return msg


def _value(arg):
    """A numpy view of an array argument, a Python number for a scalar."""
    dtype = dt.DTYPES[arg.dtype]
    if arg.ndim < 0:
        if dt.is_float(dtype):
            return ctypes.c_double.from_address(arg.data).value
        v = ctypes.c_int64.from_address(arg.data).value
        return bool(v) if dtype == "bool" else v
    shape = tuple(arg.shape[i] for i in range(arg.ndim))
    size = int(np.prod(shape)) * dt.itemsize(dtype)
    buf = (ctypes.c_char * size).from_address(arg.data) if size else bytearray(0)
    return np.frombuffer(buf, dtype=dt.to_numpy(dtype)).reshape(shape)


def _callback(name, fn):
    def call(args, nargs):
        try:
            fn(*[_value(args[k]) for k in range(nargs)])
            return 0
        except BaseException as e:     # an exception must not unwind through native frames
            tb = "".join(traceback.format_exception_only(type(e), e)).strip()
            return _fail(f"the extern function '{name}' raised {tb}")
    return CALLBACK(call)


def _symbol_address(symbol, library):
    try:
        lib = ctypes.CDLL(library) if library is not None else ctypes.CDLL(None)
    except OSError as e:
        raise TdslError(f"register_func: cannot load the library {library!r}: {e}") from None
    try:
        fn = getattr(lib, symbol)
    except AttributeError:
        where = f"the library {library!r}" if library is not None else "this process"
        raise TdslError(f"register_func: {where} has no symbol {symbol!r}") from None
    return ctypes.cast(fn, ctypes.c_void_p).value, lib


def register_func(name, f=None, override=False, library=None):
    """Registers `f` under `name` for `call_packed(name, ...)`: a Python callable, or the
    name of a C function of the `tdsl_arg` ABI (in `library`, a shared library path, or in
    the process). Without `f`, a decorator. Registering a name again needs `override`."""
    if not isinstance(name, str) or not name:
        raise TdslError(f"register_func: the name must be a non-empty string, got {name!r}")
    if f is None:
        def decorate(fn):
            register_func(name, fn, override, library)
            return fn
        return decorate
    if isinstance(f, str):
        address, keep = _symbol_address(f, library)
        what = f"C function {f}" + (f" in {library}" if library else "")
    elif callable(f):
        if library is not None:
            raise TdslError("register_func: library= goes with a C symbol name, not a callable")
        keep = _callback(name, f)
        address = ctypes.cast(keep, ctypes.c_void_p).value
        what = f"Python function {getattr(f, '__qualname__', f)!r}"
    else:
        raise TdslError(f"register_func('{name}'): expected a callable or a C symbol name, "
                        f"got {f!r}")
    from ..target import llvm_binding
    with _lock:
        if name in _current and not override:
            raise TdslError(f"register_func: '{name}' is already registered "
                            f"({_current[name].what}); pass override=True to replace it")
        symbol = f"tdsl_ext_{re.sub(r'[^0-9A-Za-z_]', '_', name)}_{len(_all) + 1}"
        entry = Entry(name, symbol, address, keep, what)
        llvm_binding().add_symbol(symbol, address)
        _all.append(entry)
        _current[name] = entry
    return f


def lookup(name) -> Entry:
    """The current registration of `name` (a shipped function is registered on first
    use); BuildError when there is none."""
    entry = _current.get(name)
    if entry is None and name in SHIPPED:
        from . import blas
        register_func(name, getattr(blas, SHIPPED[name])(), override=True)
        entry = _current[name]
    if entry is None:
        known = sorted(set(_current) | set(SHIPPED))
        raise BuildError(f"call_packed: no function is registered as '{name}'; register it "
                         f"with tdsl.register_func(name, fn) (registered: {', '.join(known)})")
    return entry


def registered(name) -> bool:
    return name in _current or name in SHIPPED


# name -> factory in `blas` returning the Python callable
SHIPPED = {"tvm.contrib.cblas.matmul": "matmul", "tdsl.contrib.cblas.matmul": "matmul"}
