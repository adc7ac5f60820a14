"""Ahead-of-time: shared libraries that load without LLVM.

`export_library` (on `Module`) writes the target machine's position-independent object
file and links it with the system C compiler (`$CC` or `cc`) into a `.so`. The library is
self-describing: `const char *__tdsl_signature(void)` returns the JSON signature (param
names, dtypes, shapes with symbolic sizes, num_user_args, entry symbol), and
`int32_t __tdsl_num_threads` sets the parallel width. `load_module(path)` opens it with
ctypes and returns a `Module` with the same argument checks as a JIT-built one.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import tempfile

from ..errors import BuildError, TdslError
from .cpu import ctypes_signature, default_num_threads
from .module import Module, Signature


def _compiler():
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") \
        or shutil.which("clang")
    if not cc:
        raise BuildError("export_library needs a C compiler to link the shared library "
                         "(set $CC or install cc/gcc/clang)")
    return cc


def link_shared(obj: bytes, path: str):
    """Links object code `obj` into the shared library `path`."""
    path = os.path.abspath(path)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tdsl_aot_") as tmp:
        o = os.path.join(tmp, "kernel.o")
        with open(o, "wb") as f:
            f.write(obj)
        out = os.path.join(tmp, "kernel.so")
        # the worker pool of parallel loops is compiled into every library
        from .threadpool import SOURCE
        cmd = [_compiler(), "-O2", "-shared", "-fPIC", "-pthread", "-o", out, o, SOURCE, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"linking the shared library failed: {' '.join(cmd)}\n"
                             f"{r.stderr.strip()}")
        # replace atomically so a library already loaded from `path` stays valid
        tmp_dst = path + f".tmp{os.getpid()}"
        shutil.copyfile(out, tmp_dst)
        os.replace(tmp_dst, path)
    return path


class SharedLibBackend:
    """The Module backend for a loaded shared library."""

    kind = "llvm-aot"

    def __init__(self, path, lib, sig):
        self.path = path
        self.lib = lib
        try:
            fn = getattr(lib, sig["symbol"])
        except AttributeError:
            raise TdslError(f"{path}: the entry point {sig['symbol']} is missing") from None
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
        if os.path.abspath(path) != os.path.abspath(self.path):
            shutil.copyfile(self.path, path)


_loaded = {}


def load_module(path) -> Module:
    """Loads a library written by `Module.export_library` (no LLVM needed)."""
    path = os.path.abspath(str(path))
    if not os.path.exists(path):
        raise TdslError(f"no such library: {path}")
    st = os.stat(path)
    ident = (st.st_dev, st.st_ino, st.st_mtime_ns)
    load_path = path
    prev = _loaded.get(path)
    if prev is not None and prev != ident:
        # dlopen would hand back the library already loaded under this name
        fd, load_path = tempfile.mkstemp(prefix="tdsl_", suffix=".so")
        os.close(fd)
        shutil.copyfile(path, load_path)
    try:
        lib = ctypes.CDLL(load_path)
    except OSError as e:
        raise TdslError(f"cannot load {path}: {e}") from None
    try:
        getsig = lib.__tdsl_signature
    except AttributeError:
        raise TdslError(f"{path} is not a tdsl library (no __tdsl_signature)") from None
    getsig.restype = ctypes.c_char_p
    getsig.argtypes = []
    sig = json.loads(getsig().decode("utf-8"))
    if load_path == path:
        _loaded[path] = ident
    backend = SharedLibBackend(path, lib, sig)
    backend.set_num_threads(default_num_threads())
    return Module(Signature(sig), backend)
