"""CPU JIT, the loading half: object files compiled by `tdsl.codegen.llvm.jit` are linked
into this process by an MCJIT engine (one per module) and called through ctypes.

`load_object` links one object file and returns its `JITArtifact` (the engine, the entry
address, the `__tdsl_num_threads` global). The caller passes the LLVM machine it compiled
for (`triple`, `new_jit_tm()`): the engine needs a target machine of its own, and this
module does not make target machines (the code generator does).

LLVM calls, compiling and loading alike, are serialised by one lock (`llvm_lock`).
"""
from __future__ import annotations

import ctypes
import threading

from ..errors import BuildError, InternalError
from .abi import default_num_threads

llvm_lock = threading.RLock()

# Builds in several threads (the graph executor compiles a network's kernels two at a
# time): tdsl's Python half (lowering, IR generation) shares tables, so one thread runs it
# at a time, holding `_python_lock`; LLVM's half releases the GIL and runs beside it. A
# thread never holds both locks: `tdsl.codegen.llvm.jit.compile_ir` lets go of the Python
# lock before taking `llvm_lock` and takes it back after.
_python_lock = threading.Lock()
_holder = threading.local()


class python_side:
    """Context: this thread runs tdsl's Python build steps (see `_python_lock`)."""

    def __enter__(self):
        _python_lock.acquire()
        _holder.held = True

    def __exit__(self, *exc):
        _holder.held = False
        _python_lock.release()


class llvm_side:
    """Within python_side: lets other threads' Python run while this one is in LLVM."""

    def __enter__(self):
        self.held = getattr(_holder, "held", False)
        if self.held:
            _holder.held = False
            _python_lock.release()

    def __exit__(self, *exc):
        if self.held:
            _python_lock.acquire()
            _holder.held = True


class JITArtifact:
    """A compiled module kept alive by its MCJIT engine."""

    def __init__(self, key, ir_text, target, symbol, engine, opt_ir, addr, threads_addr,
                 compile_s):
        self.key = key
        self.ir_text = ir_text
        self.target = target
        self.symbol = symbol
        self.engine = engine
        self.opt_ir = opt_ir
        self.addr = addr
        self.threads_addr = threads_addr
        self.compile_s = compile_s
        self.asm = None   # the assembly text, made on first get_source("asm")

    def set_num_threads(self, n: int):
        if self.threads_addr:
            ctypes.c_int32.from_address(self.threads_addr).value = int(n)

    def get_num_threads(self) -> int:
        if self.threads_addr:
            return ctypes.c_int32.from_address(self.threads_addr).value
        return 1


_libs_loaded = False
_resolved = {}


def load_support_libraries(llvm):
    """Makes libm, libgcc_s (half-precision and other compiler libcalls) and pthreads
    visible to the JIT: MCJIT binds an unknown symbol to address 0 without complaint."""
    global _libs_loaded
    if _libs_loaded:
        return
    import ctypes.util
    for name in ("m", "gcc_s", "pthread"):
        path = ctypes.util.find_library(name)
        if path:
            try:
                llvm.load_library_permanently(path)
            except RuntimeError:
                pass
    _libs_loaded = True


def check_externals(llvm, opt_ir):
    """Every function the module declares must resolve in this process."""
    for line in opt_ir.splitlines():
        if not line.startswith("declare "):
            continue
        at = line.find("@")
        if at < 0:
            continue
        name = line[at + 1:line.index("(", at)].strip('"')
        if name.startswith("llvm."):
            continue
        ok = _resolved.get(name)
        if ok is None:
            ok = _resolved[name] = bool(llvm.address_of_symbol(name))
        if not ok:
            raise BuildError(f"the generated code calls {name}, which is not available in "
                             "this process (a C library function is missing)")


def load_object(llvm, key, obj, opt_ir, ir_text, target, symbol, compile_s) -> JITArtifact:
    """Links object file `obj` into this process."""
    from . import threadpool
    load_support_libraries(llvm)
    threadpool.load_into_jit()
    check_externals(llvm, opt_ir)
    empty = llvm.parse_assembly("")
    empty.triple = target.triple
    engine = llvm.create_mcjit_compiler(empty, target.new_jit_tm())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addr = engine.get_function_address(symbol)
    if not addr:
        raise InternalError(f"the JIT symbol {symbol} did not resolve")
    try:
        taddr = engine.get_global_value_address("__tdsl_num_threads")
    except Exception:  # pragma: no cover - every generated module defines it
        taddr = 0
    art = JITArtifact(key, ir_text, target, symbol, engine, opt_ir, addr, taddr, compile_s)
    art.set_num_threads(default_num_threads())
    return art


