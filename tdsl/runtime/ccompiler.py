"""The system C compiler (`$CC`, else cc, gcc or clang): shared objects from C source or
object code. Everything happens in a temporary folder that is gone when the call returns;
callers get the library's bytes and decide where they live (the disk cache, a user's path,
a mapping made by `libfile.dlopen_bytes`)."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

from ..errors import BuildError

THREADPOOL_SOURCE = os.path.join(os.path.dirname(__file__), "threadpool.c")
# what generated code calls besides libc: the worker pool, the kernels' heap scratch and
# the ring the pool records its loops in
RUNTIME_SOURCES = (THREADPOOL_SOURCE, os.path.join(os.path.dirname(__file__), "scratch.c"),
                   os.path.join(os.path.dirname(__file__), "trace.c"))
# and what this process's executors call (an exported library needs only RUNTIME_SOURCES):
# a host run's kernel sequence walked in one native call (callseq.py)
HOST_SOURCES = RUNTIME_SOURCES + (os.path.join(os.path.dirname(__file__), "calls.c"),)


def find() -> str | None:
    """The C compiler's path, or None."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") \
        or shutil.which("clang")


def compiler(why: str = "this build") -> str:
    cc = find()
    if not cc:
        raise BuildError(f"{why} needs a C compiler (set $CC or install cc/gcc/clang)")
    return cc


@functools.lru_cache(maxsize=None)
def identity(cc: str) -> str:
    """What identifies the compiler in cache keys: its resolved path, size and mtime (an
    upgrade changes them) without running it."""
    path = shutil.which(cc) or cc
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        return f"{real}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return real


def shared_object(files: dict, flags: list, what: str, cc: str = None) -> bytes:
    """Compiles and links `files` ({name: bytes or str}; `.c` sources and `.o` objects,
    or paths given as `None` values) into a shared object and returns its bytes."""
    cc = cc or compiler(what)
    with tempfile.TemporaryDirectory(prefix="tdsl_cc_") as tmp:
        inputs = []
        for name, content in files.items():
            if content is None:           # an existing file, by path
                inputs.append(name)
                continue
            p = os.path.join(tmp, name)
            with open(p, "wb") as f:
                f.write(content.encode() if isinstance(content, str) else content)
            inputs.append(p)
        out = os.path.join(tmp, "out.so")
        cmd = [cc, *flags, "-shared", "-fPIC", "-o", out, *inputs, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"{what}: the C compiler failed: {' '.join(cmd)}\n{r.stderr.strip()}")
        with open(out, "rb") as f:
            return f.read()


def link_kernel_library(obj: bytes) -> bytes:
    """A shared library from a kernel's position-independent object file, with the worker
    pool of parallel loops and the kernels' scratch (RUNTIME_SOURCES) compiled in: it loads
    without tdsl's runtime."""
    return shared_object({"kernel.o": obj, **dict.fromkeys(RUNTIME_SOURCES)}, ["-O2", "-pthread"],
                         "export_library")


_built = {}    # (kind, key) -> library bytes compiled or read in this process


def cached_library(source: str, flags: list, kind: str, what: str) -> bytes:
    """The shared object compiled from C `source` with `flags`: from this process, else
    from the disk cache (entry kind `kind`), else from the compiler (and then cached)."""
    from . import diskcache
    cc = compiler(what)
    k = diskcache.key("c-library", source, " ".join(flags), identity(cc))
    lib = _built.get((kind, k))
    if lib is None:
        parts = diskcache.get(kind, k)
        if parts is not None and len(parts) == 1:
            lib = parts[0]
        else:
            lib = shared_object({"source.c": source}, flags, what)
            diskcache.put(kind, k, [lib])
        _built[(kind, k)] = lib
    return lib
