"""The worker pool behind parallel loops (threadpool.c), compiled once per machine with
the system C compiler and cached; generated code calls `tdsl_parallel_launch`.

Without a C compiler, code generation falls back to creating threads per launch
(pthread_create/join from the generated code): correct, ~50 us slower per parallel loop.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile

SYMBOL = "tdsl_parallel_launch"
SOURCE = os.path.join(os.path.dirname(__file__), "threadpool.c")
_state = {}


def _compiler():
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _cache_dir():
    d = os.environ.get("TDSL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tdsl")
    try:
        os.makedirs(d, exist_ok=True)
        return d
    except OSError:
        return tempfile.gettempdir()


def library():
    """The path of the compiled pool, or None where no C compiler is available."""
    if "path" in _state:
        return _state["path"]
    path = None
    cc = _compiler()
    if cc and os.path.exists(SOURCE):
        with open(SOURCE, "rb") as f:
            key = hashlib.sha256(f.read() + cc.encode()).hexdigest()[:16]
        path = os.path.join(_cache_dir(), f"tdsl_threadpool_{key}.so")
        if not os.path.exists(path):
            tmp = f"{path}.tmp{os.getpid()}"
            r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", "-o", tmp, SOURCE],
                               capture_output=True, text=True)
            if r.returncode == 0:
                os.replace(tmp, path)
            else:
                path = None
    _state["path"] = path
    return path


def load_into_jit() -> bool:
    """Makes `tdsl_parallel_launch` visible to JIT-compiled code; False if unavailable."""
    if "jit" not in _state:
        ok = False
        path = library()
        if path is not None and not os.environ.get("TDSL_NO_THREADPOOL"):
            import llvmlite.binding as llvm
            try:
                llvm.load_library_permanently(path)
                ok = True
            except RuntimeError:
                ok = False
        _state["jit"] = ok
    return _state["jit"]
