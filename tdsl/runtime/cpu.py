"""CPU JIT: LLVM IR text -> machine code in this process, through an object file that the
disk cache keeps.

`compile_ir(ir_text, target, symbol)` parses and verifies the IR, runs the O2 pipeline of
the new pass manager with the target machine of `target`, emits an object file and loads
it into an MCJIT engine (one per module). The object file, the optimised IR and the IR
are stored in the persistent cache (`diskcache`) under `object_key(ir_text, target)`, so
a later process skips LLVM's optimisation and code generation: it only links the object
(~1 ms). Loaded artifacts are also kept in memory by that key, so rebuilding an unchanged
kernel in the same process costs the IR generation plus a dictionary lookup.

`load_build` / `remember_build` serve `tdsl.build`'s cache of whole builds: a schedule's
fingerprint -> (object key, signature, notes), which skips lowering and IR generation too.
LLVM calls are serialised by one lock.
"""
from __future__ import annotations

import collections
import ctypes
import json
import threading
import time
import zlib

from ..errors import BuildError, InternalError
from ..codegen.target import LLVMTarget, llvm_binding
from . import diskcache
from .abi import ctypes_signature, default_num_threads

_lock = threading.RLock()

# Builds in several threads (the graph executor compiles a network's kernels two at a
# time): tdsl's Python half (lowering, IR generation) shares tables, so one thread runs it
# at a time, holding `_python_lock`; LLVM's half releases the GIL and runs beside it. A
# thread never holds both locks: compile_ir lets go of the Python lock before taking
# `_lock` and takes it back after.
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


class _llvm_side:
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
_cache: "collections.OrderedDict[str, JITArtifact]" = collections.OrderedDict()
CACHE_SIZE = 512
stats = {"hits": 0, "misses": 0, "disk_hits": 0, "build_hits": 0, "compile_s": 0.0}


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


# LLVM's O2 pipeline: the code is as fast as O3's on the zoo and the kernel benches
# (measured interleaved on znver4: efficientnet, resnet50, mobilenet_v2, densenet121,
# convnext_tiny, BERT, GEMM, conv2d 3x3), since tdsl emits its vectors and unrolling
# itself; O3's extra passes cost 5-25% of a network's cold build
SPEED_LEVEL = 2
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
        pto = llvm.create_pipeline_tuning_options(speed_level=SPEED_LEVEL)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        _pto_cache[target.key] = pto
    pb = llvm.create_pass_builder(target.tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)


def target_identity(target: LLVMTarget) -> str:
    """What, besides the IR, decides the machine code: the target and the LLVM version."""
    import llvmlite
    llvm = llvm_binding()
    return "|".join([target.description.fingerprint, target.features, f"O{SPEED_LEVEL}",
                     "llvm " + ".".join(map(str, llvm.llvm_version_info)),
                     "llvmlite " + llvmlite.__version__])


def object_key(ir_text: str, target: LLVMTarget) -> str:
    return diskcache.key("llvm-object", ir_text, target_identity(target))


def _codegen(llvm, ir_text, target):
    """IR text -> (object file, optimised IR): LLVM's whole cost of a build."""
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    except RuntimeError as e:
        raise InternalError(f"the generated LLVM IR does not verify: {e}\nThis is a tdsl "
                            "bug; please report it with the kernel that triggered it") from None
    mod.triple = target.triple
    _optimize(llvm, mod, target)
    opt_ir = str(mod)
    _check_externals(llvm, opt_ir)
    return target.tm.emit_object(mod), opt_ir


def _load(llvm, key, obj, opt_ir, ir_text, target, symbol, compile_s) -> JITArtifact:
    """Links object file `obj` into this process."""
    from . import threadpool
    _load_support_libraries(llvm)
    threadpool.load_into_jit()
    _check_externals(llvm, opt_ir)
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
    _cache[key] = art
    while len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return art


def _from_memory(key):
    art = _cache.get(key)
    if art is not None:
        _cache.move_to_end(key)
        stats["hits"] += 1
    return art


def _from_disk(llvm, key, target, symbol):
    parts = diskcache.get("llvm", key)
    if parts is None or len(parts) != 3:
        return None
    obj, opt_ir, ir_text = parts[0], zlib.decompress(parts[1]).decode(), \
        zlib.decompress(parts[2]).decode()
    stats["disk_hits"] += 1
    return _load(llvm, key, obj, opt_ir, ir_text, target, symbol, 0.0)


def compile_ir(ir_text: str, target: LLVMTarget, symbol: str) -> JITArtifact:
    key = object_key(ir_text, target)
    with _llvm_side(), _lock:
        art = _from_memory(key)
        if art is not None:
            return art
        llvm = llvm_binding()
        art = _from_disk(llvm, key, target, symbol)
        if art is not None:
            return art
        stats["misses"] += 1
        t0 = time.perf_counter()
        _load_support_libraries(llvm)
        obj, opt_ir = _codegen(llvm, ir_text, target)
        diskcache.put("llvm", key, [obj, zlib.compress(opt_ir.encode(), 1),
                                    zlib.compress(ir_text.encode(), 1)])
        dt_ = time.perf_counter() - t0
        stats["compile_s"] += dt_
        return _load(llvm, key, obj, opt_ir, ir_text, target, symbol, dt_)


def load_artifact(key: str, target: LLVMTarget, symbol: str):
    """The artifact stored under object key `key` (memory, then disk), or None."""
    with _lock:
        art = _from_memory(key)
        if art is None:
            art = _from_disk(llvm_binding(), key, target, symbol)
        return art


def _build_key(fingerprint, target):
    return diskcache.key("llvm-build", fingerprint, target_identity(target))


def load_build(fingerprint: str, target: LLVMTarget):
    """The module `tdsl.build` made earlier from a schedule with this fingerprint, or None."""
    from .module import Module
    parts = diskcache.get("build", _build_key(fingerprint, target))
    if parts is None or len(parts) != 1:
        return None
    rec = json.loads(parts[0])
    art = load_artifact(rec["object"], target, rec["sig"]["symbol"])
    if art is None:
        return None
    stats["build_hits"] += 1
    mod = Module(rec["sig"], JITBackend(art, rec["sig"]))
    mod.notes = list(rec["notes"])
    return mod


def remember_build(fingerprint: str, target: LLVMTarget, mod):
    """Records that the schedule with this fingerprint built `mod` (a JIT module)."""
    rec = {"object": mod._backend.art.key, "sig": mod.signature.raw, "notes": list(mod.notes)}
    diskcache.put("build", _build_key(fingerprint, target), [json.dumps(rec).encode()])


def clear_cache():
    """Forgets the modules compiled in this process (the disk cache stays)."""
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
        from .ccompiler import link_kernel_library
        from .libfile import seal, write_atomic
        obj = self.art.object_code()
        if path.endswith(".o"):  # a bare object file for the user's own link
            write_atomic(path, obj)
            return
        write_atomic(path, seal(link_kernel_library(obj)))
