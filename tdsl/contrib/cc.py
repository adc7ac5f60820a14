"""`create_shared(output, objects)`: TVM's `tvm.contrib.cc.create_shared` for tdsl object
files. `Module.save("k.o")` writes a position-independent object that defines the kernel,
`__tdsl_signature` and `__tdsl_num_threads`; linked here, the library describes itself the way
an `export_library` one does, so `tdsl.load_module` reads it.

The library is written sealed (size and SHA-256 trailer, `tdsl.runtime.libfile`): it is a
file tdsl writes, and `load_module` verifies every such file before mapping it. A library
linked by another tool carries no seal and `load_module` refuses it; link with this helper
(extra objects and flags may be passed) so that the check covers it too.

One tdsl object per library: each defines the same two symbols, and the linker rejects a
second (the compiler's message is in the BuildError)."""
from __future__ import annotations

import os

from ..errors import BuildError
from ..runtime.ccompiler import RUNTIME_SOURCES, shared_object
from ..runtime.libfile import seal, write_atomic


def create_shared(output, objects, options=None, cc=None):
    """Links `objects` (paths: `.o` files from `Module.save`, other objects or C sources)
    into the shared library `output` with the system C compiler (`cc`, else `$CC`, cc, gcc
    or clang), adding the worker pool that parallel loops call and the kernels' heap
    scratch. `options`: extra compiler flags. Returns `output`."""
    if isinstance(objects, (str, os.PathLike)):
        objects = [objects]
    files = {}
    for o in objects:
        p = os.path.abspath(os.fspath(o))
        if not os.path.isfile(p):
            raise BuildError(f"create_shared: no such file {p}")
        files[p] = None
    if not files:
        raise BuildError("create_shared: no object files to link")
    files.update(dict.fromkeys(RUNTIME_SOURCES))
    lib = shared_object(files, ["-O2", "-pthread", *(options or [])],
                        f"create_shared({os.fspath(output)!r})", cc)
    write_atomic(os.fspath(output), seal(lib))
    return os.fspath(output)
