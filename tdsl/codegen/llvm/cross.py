"""Compile-only modules for llvm targets this machine cannot run (another architecture such
as `llvm -mtriple=aarch64-linux-gnu`, or a vector ISA wider than the host's): the code is
generated and optimised exactly as for a runnable target, so `get_source("asm")` shows what
the target would execute, and `export_library("x.o")` writes its object file."""
from __future__ import annotations

from ...errors import BuildError
from ...runtime.module import Module
from ...target import llvm_binding
from . import codegen
from .jit import optimize
from .machine import parse_target


class CrossBackend:
    kind = "llvm-cross"

    def __init__(self, target, ir_text, opt_ir):
        self.target = target
        self.ir_text = ir_text
        self.opt_ir = opt_ir

    def cfunc(self, *args):
        raise self.not_runnable()

    def set_num_threads(self, n):
        pass

    def get_num_threads(self):
        return self.target.description.num_cores

    def _machine_code(self, emit):
        llvm = llvm_binding()
        return emit(llvm.parse_assembly(self.opt_ir))

    def source(self, fmt):
        if fmt in ("", "ll", "llvm", "ir"):
            return self.opt_ir
        if fmt in ("ll-unopt", "unopt"):
            return self.ir_text
        if fmt in ("asm", "s"):
            return self._machine_code(self.target.tm.emit_assembly)
        raise BuildError(f"unknown source format {fmt!r}; use '', 'll' or 'asm'")

    def export(self, path, sig):
        if not path.endswith(".o"):
            raise BuildError(f"export_library({path!r}): a module for {self.target.key!r} cannot be "
                             "linked on this machine; export an object file ('.o') instead")
        with open(path, "wb") as f:
            f.write(self._machine_code(self.target.tm_pic.emit_object))

    def not_runnable(self):
        d = self.target.description
        return BuildError(f"this module was compiled for {d.key!r} ({d.cpu}, {d.triple}), which "
                          "this machine cannot run; use get_source('asm') or export_library('x.o')")


def build(func, target):
    """A compile-only `Module` of `func` for `target` (a `tdsl.target.Target`)."""
    tgt = parse_target(target)
    ir_text, sig, notes = codegen(func, tgt)
    llvm = llvm_binding()
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    mod.triple = tgt.triple
    optimize(llvm, mod, tgt)
    m = Module(sig, CrossBackend(tgt, ir_text, str(mod)))
    m.notes = list(notes)
    return m
