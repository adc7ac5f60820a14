"""Ahead-of-time: shared libraries that load without LLVM.

`export_library` (on `Module`) links the target machine's position-independent object
file with the system C compiler into a `.so` (`ccompiler.link_kernel_library`) and writes
it sealed (`libfile`: size and SHA-256 in a trailer). The library is self-describing:
`const char *__tdsl_signature(void)` returns the JSON signature (param names, dtypes,
shapes with symbolic sizes, num_user_args, entry symbol), and `int32_t __tdsl_num_threads`
sets the parallel width. `load_module(path)` checks the seal before anything is mapped
(a truncated or altered file raises `LibraryError`, it never reaches `dlopen`), then
returns a `Module` with the same argument checks as a JIT-built one.
"""
from __future__ import annotations

import ctypes
import json
import os

from ..errors import LibraryError, TdslError
from .abi import ctypes_signature, default_num_threads
from .libfile import dlopen_bytes, read_sealed, seal, write_atomic
from .module import Module
from .signature import Signature


class SharedLibBackend:
    """The Module backend for a loaded shared library; `payload` is the library's bytes
    (for export_library)."""

    kind = "llvm-aot"

    def __init__(self, path, lib, sig, payload):
        self.path = path
        self.lib = lib
        self.payload = payload
        try:
            fn = getattr(lib, sig["symbol"])
        except AttributeError:
            raise LibraryError(f"{path}: the entry point {sig['symbol']} is missing") from None
        self.cfunc = ctypes_signature(sig)(ctypes.cast(fn, ctypes.c_void_p).value)
        try:
            self._threads = ctypes.c_int32.in_dll(lib, "__tdsl_num_threads")
        except ValueError:  # pragma: no cover
            self._threads = None

    def set_num_threads(self, n):
        if self._threads is not None:
            self._threads.value = int(n)

    def get_num_threads(self):
        return self._threads.value if self._threads is not None else 1

    def source(self, fmt):
        raise TdslError(f"the module loaded from {self.path} keeps no source; get_source() "
                        "works on modules built in this process")

    def export(self, path, sig):
        write_atomic(path, seal(self.payload))


def open_library(payload: bytes, what: str):
    """Maps a verified library; returns (ctypes library, signature dict)."""
    lib = dlopen_bytes(payload, what)
    try:
        getsig = lib.__tdsl_signature
    except AttributeError:
        raise LibraryError(f"{what} is not a tdsl library (no __tdsl_signature)") from None
    getsig.restype = ctypes.c_char_p
    getsig.argtypes = []
    try:
        sig = json.loads(getsig().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise LibraryError(f"{what}: its signature is not valid JSON ({e})") from None
    return lib, sig


def load_module(path) -> Module:
    """Loads a library written by `Module.export_library` (no LLVM needed); a missing,
    truncated, altered or foreign file raises `LibraryError`."""
    path = os.path.abspath(os.fspath(path))
    payload = read_sealed(path)
    lib, sig = open_library(payload, path)
    try:
        signature = Signature(sig)
    except (TdslError, KeyError, TypeError) as e:
        raise LibraryError(f"{path}: unusable signature ({type(e).__name__}: {e})") from None
    backend = SharedLibBackend(path, lib, sig, payload)
    backend.set_num_threads(default_num_threads())
    return Module(signature, backend)
