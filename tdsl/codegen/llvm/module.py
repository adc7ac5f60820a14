"""Module-level state of one LLVM build: the llvmlite module, function attributes for the
target CPU, declarations of intrinsics and libc functions, and the globals every module
defines (`__tdsl_num_threads`, `__tdsl_signature`)."""
from __future__ import annotations

from typing import List

from llvmlite import ir

from ... import dtype as dt
from ...ir import stmt as S
from ...ir.visitor import free_vars
from .types import I8, I32, PTR, sanitize


class ModuleBuilder:
    def __init__(self, func: S.PrimFunc, target):
        self.func = func
        self.target = target
        self.symbol = "tdsl_" + sanitize(func.name)
        self.module = ir.Module(name=self.symbol)
        self.module.triple = target.triple
        self.module.data_layout = target.data_layout
        self._decls = {}
        self._counter = 0
        self.notes: List[str] = []
        self.externs = {}         # registered name -> registry entry, for extern stages
        # integer scalars are run-time sizes (or offsets): index arithmetic in 64 bits
        self.wide_index = any(not isinstance(p, S.Buffer) and p.dtype != "bool"
                              and not dt.is_float(p.dtype) for p in func.params)
        # the run-time sizes among the parameters: loops over them get loop metadata
        self.size_vars = frozenset(p for p in func.params if not isinstance(p, S.Buffer)
                                   and dt.is_int(p.dtype))
        self._threads = None
        from ...runtime import threadpool
        self.use_pool = threadpool.load_into_jit()

    def over_sizes(self, loop) -> bool:
        """Whether `loop`'s bounds read the function's run-time sizes."""
        return bool(self.size_vars & (free_vars(loop.extent) | free_vars(loop.min)))

    def fresh(self, stem):
        self._counter += 1
        return f"{self.symbol}_{stem}{self._counter}"

    def add_fn_attrs(self, fn, internal=False):
        fn.attributes.add("nounwind")
        # llvmlite only knows enum attributes; string attributes go into the set directly.
        set.add(fn.attributes, f'"target-cpu"="{self.target.cpu}"')
        if self.target.features:
            set.add(fn.attributes, f'"target-features"="{self.target.features}"')
        if self.target.has_avx512:
            set.add(fn.attributes, '"prefer-vector-width"="512"')
            set.add(fn.attributes, '"min-legal-vector-width"="512"')
        if internal:
            fn.linkage = "internal"

    def declare(self, name, ret, args):
        """The function `name` of this module, declared on first use."""
        fn = self._decls.get(name)
        if fn is None:
            existing = self.module.globals.get(name)
            if existing is not None:
                fn = existing
            else:
                fn = ir.Function(self.module, ir.FunctionType(ret, list(args)), name)
            self._decls[name] = fn
        return fn

    # LLVM intrinsics are declared by hand: llvmlite's `declare_intrinsic` cannot overload
    # on vector types
    intrinsic = declare

    def loop_kept_as_written(self):
        """A fresh `!llvm.loop` ID telling LLVM not to vectorize, interleave or unroll the
        loop whose latch carries it: a tail peeled off a loop of symbolic extent runs less
        than one tile, and LLVM, not knowing that, would widen and runtime-unroll it."""
        m = self.module
        if not hasattr(self, "_loop_props"):
            self._loop_props = [
                m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.enable"),
                                ir.Constant(ir.IntType(1), 0)]),
                m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")])]
        # a loop ID refers to itself; the placeholder operand keeps each ID its own node
        loop_id = m.add_metadata([ir.MetaDataString(m, self.fresh("loop"))])
        loop_id.operands = (loop_id, *self._loop_props)
        return loop_id

    def loop_not_runtime_unrolled(self):
        """A fresh `!llvm.loop` ID telling LLVM not to unroll the loop by a run-time
        count: a loop over a run-time size (a chunk of a sequence) already runs tdsl's
        vectors and unrolled tiles, and LLVM's remainder loops for it only lengthen the
        build (BERT's dynamic kernels: a quarter of their LLVM time)."""
        m = self.module
        if not hasattr(self, "_runtime_prop"):
            self._runtime_prop = m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.runtime.disable")])
        loop_id = m.add_metadata([ir.MetaDataString(m, self.fresh("loop"))])
        loop_id.operands = (loop_id, self._runtime_prop)
        return loop_id

    @property
    def num_threads_global(self):
        if self._threads is None:
            g = ir.GlobalVariable(self.module, I32, "__tdsl_num_threads")
            g.initializer = ir.Constant(I32, 1)
            g.align = 4
            self._threads = g
        return self._threads

    def add_signature(self, text: str):
        data = bytearray(text.encode("utf-8") + b"\0")
        arr = ir.ArrayType(I8, len(data))
        g = ir.GlobalVariable(self.module, arr, "__tdsl_signature_data")
        g.initializer = ir.Constant(arr, data)
        g.global_constant = True
        g.linkage = "internal"
        fn = ir.Function(self.module, ir.FunctionType(PTR, []), "__tdsl_signature")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(b.bitcast(g, PTR))
