"""CPU JIT, the compiling half: LLVM IR text -> an object file, which `tdsl.runtime.cpu`
links into this process, through an object cache that the disk cache keeps.

`compile_ir(ir_text, target, symbol)` parses and verifies the IR, runs the O2 pipeline of
the new pass manager with the target machine of `target`, emits an object file and loads
it (`runtime.cpu.load_object`, one MCJIT engine per module). The object file, the optimised
IR and the IR are stored in the persistent cache (`diskcache`) under
`object_key(ir_text, target)`, so a later process skips LLVM's optimisation and code
generation: it only links the object (~1 ms). Loaded artifacts are also kept in memory by
that key, so rebuilding an unchanged kernel in the same process costs the IR generation
plus a dictionary lookup.

`load_build` / `remember_build` serve `tdsl.build`'s cache of whole builds: a schedule's
fingerprint -> (object key, signature, notes), which skips lowering and IR generation too.
LLVM calls are serialised by `runtime.cpu.llvm_lock`.
"""
from __future__ import annotations

import collections
import json
import time
import zlib

from ...errors import BuildError, InternalError
from ...runtime import cpu, diskcache
from ...runtime.abi import ctypes_signature
from ...runtime.cpu import JITArtifact
from ...runtime.module import Module
from ...target import llvm_binding
from .machine import LLVMTarget

_cache: "collections.OrderedDict[str, JITArtifact]" = collections.OrderedDict()
CACHE_SIZE = 512
stats = {"hits": 0, "misses": 0, "disk_hits": 0, "build_hits": 0, "compile_s": 0.0}

# LLVM's O2 pipeline: the code is as fast as O3's on the zoo and the kernel benches,
# since tdsl emits its vectors and unrolling itself; O3's extra passes only lengthen a
# network's cold build
SPEED_LEVEL = 2
_pto_cache = {}


def optimize(llvm, mod, target: LLVMTarget):
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
    optimize(llvm, mod, target)
    opt_ir = str(mod)
    cpu.check_externals(llvm, opt_ir)
    return target.tm.emit_object(mod), opt_ir


def _keep(art):
    _cache[art.key] = art
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
    return _keep(cpu.load_object(llvm, key, obj, opt_ir, ir_text, target, symbol, 0.0))


def compile_ir(ir_text: str, target: LLVMTarget, symbol: str) -> JITArtifact:
    key = object_key(ir_text, target)
    with cpu.llvm_side(), cpu.llvm_lock:
        art = _from_memory(key)
        if art is not None:
            return art
        llvm = llvm_binding()
        art = _from_disk(llvm, key, target, symbol)
        if art is not None:
            return art
        stats["misses"] += 1
        t0 = time.perf_counter()
        cpu.load_support_libraries(llvm)
        obj, opt_ir = _codegen(llvm, ir_text, target)
        diskcache.put("llvm", key, [obj, zlib.compress(opt_ir.encode(), 1),
                                    zlib.compress(ir_text.encode(), 1)])
        dt_ = time.perf_counter() - t0
        stats["compile_s"] += dt_
        return _keep(cpu.load_object(llvm, key, obj, opt_ir, ir_text, target, symbol, dt_))


def load_artifact(key: str, target: LLVMTarget, symbol: str):
    """The artifact stored under object key `key` (memory, then disk), or None."""
    with cpu.llvm_lock:
        art = _from_memory(key)
        if art is None:
            art = _from_disk(llvm_binding(), key, target, symbol)
        return art


def _build_key(fingerprint, target):
    return diskcache.key("llvm-build", fingerprint, target_identity(target))


def load_build(fingerprint: str, target: LLVMTarget):
    """The module `tdsl.build` made earlier from a schedule with this fingerprint, or None."""
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
    rec = {"object": mod.backend.art.key, "sig": mod.signature.raw, "notes": list(mod.notes)}
    diskcache.put("build", _build_key(fingerprint, target), [json.dumps(rec).encode()])


def clear_cache():
    """Forgets the modules compiled in this process (the disk cache stays)."""
    with cpu.llvm_lock:
        _cache.clear()


def assembly(art: JITArtifact) -> str:
    if art.asm is None:
        llvm = llvm_binding()
        with cpu.llvm_lock:
            mod = llvm.parse_assembly(art.opt_ir)
            art.asm = art.target.tm.emit_assembly(mod)
    return art.asm


def object_code(art: JITArtifact) -> bytes:
    """A position-independent object file of the optimised module."""
    llvm = llvm_binding()
    with cpu.llvm_lock:
        mod = llvm.parse_assembly(art.opt_ir)
        return art.target.tm_pic.emit_object(mod)


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
            return assembly(self.art)
        if fmt in ("ll-unopt", "unopt"):
            return self.art.ir_text
        raise BuildError(f"unknown source format {fmt!r}; use '', 'll' or 'asm'")

    def export(self, path, sig):
        from ...runtime.ccompiler import link_kernel_library
        from ...runtime.libfile import seal, write_atomic
        obj = object_code(self.art)
        if path.endswith(".o"):  # a bare object file for the user's own link
            write_atomic(path, obj)
            return
        write_atomic(path, seal(link_kernel_library(obj)))
