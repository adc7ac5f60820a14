"""CPU JIT: LLVM IR text -> optimised machine code in this process, with a compile cache.

`compile_ir(ir_text, target, symbol)` parses and verifies the IR, runs the O3 pipeline of
the new pass manager with the target machine of `target`, JIT-compiles it with MCJIT (one
engine per module) and returns a `JITArtifact`. Results are cached in memory by
(unoptimised IR text, target key), so rebuilding an unchanged kernel costs the IR
generation plus a dictionary lookup. LLVM calls are serialised by one lock.
"""
from __future__ import annotations

import collections
import ctypes
import os
import threading
import time

from ..errors import BuildError, InternalError
from ..codegen.target import LLVMTarget, llvm_binding

_lock = threading.RLock()
_cache: "collections.OrderedDict[tuple, JITArtifact]" = collections.OrderedDict()
CACHE_SIZE = 512
stats = {"hits": 0, "misses": 0, "compile_s": 0.0}


def default_num_threads() -> int:
    env = os.environ.get("TDSL_NUM_THREADS")
    if env:
        try:
            n = int(env)
            if n >= 1:
                return n
        except ValueError:
            pass
    return max(1, os.cpu_count() or 1)


def ctypes_signature(sig):
    """ctypes argument types of the generated entry point for a signature dict."""
    types = []
    for p in sig["params"]:
        if p["kind"] == "buffer":
            types.append(ctypes.c_void_p)
        elif p["dtype"].startswith("float"):
            types.append(ctypes.c_double)
        else:
            types.append(ctypes.c_int64)
    return ctypes.CFUNCTYPE(ctypes.c_int32, *types)


class JITArtifact:
    """A compiled module kept alive by its MCJIT engine."""

    def __init__(self, ir_text, target, symbol, engine, opt_ir, addr, threads_addr,
                 compile_s):
        self.ir_text = ir_text
        self.target = target
        self.symbol = symbol
        self.engine = engine
        self.opt_ir = opt_ir
        self.addr = addr
        self.threads_addr = threads_addr
        self.compile_s = compile_s
        self._asm = None

    def set_num_threads(self, n: int):
        if self.threads_addr:
            ctypes.c_int32.from_address(self.threads_addr).value = int(n)

    def get_num_threads(self) -> int:
        if self.threads_addr:
            return ctypes.c_int32.from_address(self.threads_addr).value
        return 1

    def asm(self) -> str:
        if self._asm is None:
            llvm = llvm_binding()
            with _lock:
                mod = llvm.parse_assembly(self.opt_ir)
                self._asm = self.target.tm.emit_assembly(mod)
        return self._asm

    def object_code(self) -> bytes:
        """A position-independent object file of the optimised module."""
        llvm = llvm_binding()
        with _lock:
            mod = llvm.parse_assembly(self.opt_ir)
            return self.target.tm_pic.emit_object(mod)


_pto_cache = {}
_libs_loaded = False
_resolved = {}


def _load_support_libraries(llvm):
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


def _check_externals(llvm, opt_ir):
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


def _optimize(llvm, mod, target: LLVMTarget):
    pto = _pto_cache.get(target.key)
    if pto is None:
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        _pto_cache[target.key] = pto
    pb = llvm.create_pass_builder(target.tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)


def compile_ir(ir_text: str, target: LLVMTarget, symbol: str) -> JITArtifact:
    key = (ir_text, target.key)
    with _lock:
        art = _cache.get(key)
        if art is not None:
            _cache.move_to_end(key)
            stats["hits"] += 1
            return art
        stats["misses"] += 1
        t0 = time.perf_counter()
        llvm = llvm_binding()
        try:
            mod = llvm.parse_assembly(ir_text)
            mod.verify()
        except RuntimeError as e:
            raise InternalError(f"the generated LLVM IR does not verify: {e}\nThis is a tdsl "
                                "bug; please report it with the kernel that triggered it") from None
        mod.triple = target.triple
        _load_support_libraries(llvm)
        _optimize(llvm, mod, target)
        opt_ir = str(mod)
        _check_externals(llvm, opt_ir)
        engine = llvm.create_mcjit_compiler(mod, target.new_jit_tm())
        engine.finalize_object()
        addr = engine.get_function_address(symbol)
        if not addr:
            raise BuildError(f"internal error: JIT symbol {symbol} did not resolve")
        try:
            taddr = engine.get_global_value_address("__tdsl_num_threads")
        except Exception:  # pragma: no cover
            taddr = 0
        dt_ = time.perf_counter() - t0
        stats["compile_s"] += dt_
        art = JITArtifact(ir_text, target, symbol, engine, opt_ir, addr, taddr, dt_)
        art.set_num_threads(default_num_threads())
        _cache[key] = art
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
        return art


def clear_cache():
    with _lock:
        _cache.clear()


class JITBackend:
    """The Module backend for a JIT-compiled artifact."""

    kind = "llvm-jit"

    def __init__(self, art: JITArtifact, sig):
        self.art = art
        self.cfunc = ctypes_signature(sig)(art.addr)

    def set_num_threads(self, n):
        self.art.set_num_threads(n)

    def get_num_threads(self):
        return self.art.get_num_threads()

    def source(self, fmt):
        if fmt in ("", "ll", "llvm", "ir"):
            return self.art.opt_ir
        if fmt in ("asm", "s"):
            return self.art.asm()
        if fmt in ("ll-unopt", "unopt"):
            return self.art.ir_text
        raise BuildError(f"unknown source format {fmt!r}; use '', 'll' or 'asm'")

    def export(self, path, sig):
        from .aot import link_shared
        obj = self.art.object_code()
        if path.endswith(".o"):  # a bare object file for the user's own link
            with open(path, "wb") as f:
                f.write(obj)
            return
        link_shared(obj, path)
