"""The C-family printer (DESIGN.md §8): statements, loops, vectorized loops and kernels
of the loop IR, over the shared expression printer (`exprs.CExprPrinter`). The dialect
subclasses (`c`, `cuda`, `opencl`, `c_gpu`) only say how a target spells things.
"""
from __future__ import annotations

from ... import arith
from ... import dtype as dt
from ...errors import BuildError
from ...ir import expr as E
from ...ir import stmt as S
from ...ir.atomic import atomic_operand
from ...ir.expr import Range
from ...ir.visitor import walk
from ...passes.gpu import MAX_SHARED_BYTES, check_shared, shared_align
from ..signature import stored_buffers
from .exprs import CExprPrinter


_VARYING = object()      # a guard that differs across the lanes of a vector loop


def _mentions(e, var) -> bool:
    found = []
    walk(e, lambda n: found.append(n) if n is var else None)
    return bool(found)


class CFamilyPrinter(CExprPrinter):
    """Shared printing; subclasses override the target hooks below."""

    has_threads = False
    vector_width = 0     # 4: float4 loads/stores for vectorized float32 loops

    # ------------------------------------------------------------------ target hooks
    def thread_index(self, tag) -> str:
        raise BuildError(f"the {self.target} target has no GPU threads (loop bound to {tag})")

    def barrier(self) -> str:
        return ""

    def shared_decl(self, type_name, name, size, align=16) -> str:
        raise BuildError(f"the {self.target} target has no shared memory")

    def vector_load(self, vec_type, ptr) -> str:
        raise NotImplementedError

    def vector_store(self, vec_type, ptr, lanes) -> str:
        raise NotImplementedError

    def vector_zero(self, vec_type) -> str:
        raise NotImplementedError

    def vector_copy(self, dst, src):
        """A statement moving 16 bytes from pointer `src` to `dst` (both 16-byte aligned),
        or None where the dialect has no such move."""
        return None

    def emit(self, text):
        self.lines.append("  " * self.ind + text)

    # ------------------------------------------------------------------ statements
    def stmt(self, s):
        getattr(self, "s_" + type(s).__name__)(s)

    def s_SeqStmt(self, s):
        for x in s.stmts:
            self.stmt(x)

    def s_Evaluate(self, s):
        self.emit(f"(void)({self.expr(s.value)});")

    def s_ExternCall(self, s):
        raise BuildError(f"the {self.target} code generator cannot call the extern function "
                         f"'{s.name}'; tdsl.extern stages build for 'llvm' only")

    def s_Barrier(self, s):
        b = self.barrier()
        if b:
            self.emit(b)

    def s_AsyncCommit(self, s):
        text = self.async_commit()
        if text:
            self.emit(text)

    def s_Prefetch(self, s):
        text = self.prefetch_text(s)
        if text:
            self.emit(text)

    def prefetch_text(self, s):
        """The code fetching the run a `Prefetch` names, or None where the target has no
        use for the hint (GPU buffers are not cached the way a CPU's are)."""
        return None

    def async_commit(self):
        """The statement closing a group of `async_copy`s, or None where copies are
        synchronous."""
        return None

    def _push_range(self, var, rng):
        old = self.ranges
        self.ranges = dict(old)
        self.ranges[var] = rng
        return old

    def s_LetStmt(self, s):
        name = self.names(s.var, s.var.name)
        self.emit("{")
        self.ind += 1
        self.emit(f"const {self.type_name(s.var.dtype)} {name} = {self.expr(s.value)};")
        old = self.ranges
        if dt.is_int(s.var.dtype):
            old = self._push_range(s.var, Range(s.value, E.const(1, s.value.dtype)))
        self.stmt(s.body)
        self.ranges = old
        self.ind -= 1
        self.emit("}")

    def s_IfThenElse(self, s):
        self.emit(f"if ({self.expr(s.cond)}) {{")
        self.ind += 1
        self.stmt(s.then_case)
        self.ind -= 1
        if s.else_case is not None:
            self.emit("} else {")
            self.ind += 1
            self.stmt(s.else_case)
            self.ind -= 1
        self.emit("}")

    def s_BufferStore(self, s):
        if s.atomic:
            self.atomic_store(s)
            return
        self.emit(f"{self.bufname(s.buffer)}[{self.index(s.indices, s.buffer)}] = "
                  f"{self.expr(s.value)};")

    def atomic_store(self, s):
        """An atomic read-modify-write (`BufferStore.atomic`). Plain C runs its parallel
        and GPU loops on one thread, so the store as written is one; the GPU dialects
        print atomic instructions (`atomic_rmw`)."""
        atomic_operand(s)       # checks the form the GPU dialects rely on
        self.emit(f"{self.bufname(s.buffer)}[{self.index(s.indices, s.buffer)}] = "
                  f"{self.expr(s.value)};")

    def atomic_cas(self, s, cas, to_bits, from_bits, bits_type):
        """A compare-and-swap loop for atomic store `s`: `cas(ptr, expected, new)` returns
        the old bits; `to_bits`/`from_bits` reinterpret a value as `bits_type` and back."""
        t = self.type_name(s.buffer.dtype)
        e = atomic_operand(s)
        ptr = f"&{self.bufname(s.buffer)}[{self.index(s.indices, s.buffer)}]"
        q = "__local " if s.buffer.scope == "shared" and self.target == "opencl" else \
            "__global " if self.target == "opencl" else ""
        self.emit("{")
        self.ind += 1
        self.emit(f"const {t} tdsl_d = {self.expr(e)};")
        self.emit(f"volatile {q}{bits_type}* tdsl_p = (volatile {q}{bits_type}*)({ptr});")
        self.emit(f"{bits_type} tdsl_seen = *tdsl_p, tdsl_want;")
        old = f"{from_bits}(tdsl_want)"
        new = {"add": f"({old} + tdsl_d)", "mul": f"({old} * tdsl_d)"}.get(s.atomic) or \
            self.minmax_text(s.atomic == "max", old, "tdsl_d", s.buffer.dtype)
        self.emit("do {")
        self.emit("  tdsl_want = tdsl_seen;")
        p = "tdsl_p" if self.target == "opencl" else f"({bits_type}*)tdsl_p"  # CUDA's: not volatile
        self.emit(f"  tdsl_seen = {cas}({p}, tdsl_want, {to_bits}({new}));")
        self.emit("} while (tdsl_seen != tdsl_want);")
        self.ind -= 1
        self.emit("}")

    def s_Allocate(self, s):
        buf = self.buf_alias.get(s.buffer, s.buffer)
        if buf.scope == "shared":   # declared at kernel scope
            self.stmt(s.body)
            return
        size = arith.simplify(buf.shape[0]) if len(buf.shape) == 1 else None
        name = self.bufname(buf)
        t = self.mem_type(buf.dtype)
        self.emit("{")
        self.ind += 1
        if isinstance(size, E.IntImm) and (buf.scope == "local" or
                                           size.value * dt.bits(buf.dtype) // 8 <= 32768):
            self.emit(f"{t} {name}[{max(size.value, 1)}];")
            self.stmt(s.body)
        else:
            self.alloc_heap(buf, name, t, size, s.body)
        self.ind -= 1
        self.emit("}")

    def alloc_heap(self, buf, name, t, size, body):
        raise BuildError(f"buffer '{buf.name}' ({buf.scope}) of size {list(buf.shape)} cannot be "
                         f"allocated inside a {self.target} kernel: local buffers need a "
                         "constant size")

    def s_For(self, s):
        v = self.names(s.var, s.var.name)
        if s.kind is S.ForKind.THREAD_BINDING:
            self.emit("{")
            self.ind += 1
            self.emit(f"const {self.type_name(s.var.dtype)} {v} = {self.thread_index(s.thread_tag)};")
            old = self._push_range(s.var, Range(E.const(0), s.extent))
            self.stmt(s.body)
            self.ranges = old
            self.ind -= 1
            self.emit("}")
            return
        if s.kind is S.ForKind.VECTORIZED and \
                (self.copy_for(s) or (self.vector_width and self.vector_for(s))):
            return
        if s.kind in (S.ForKind.UNROLLED, S.ForKind.VECTORIZED):
            self.unroll_pragma(s)
        elif dict(s.pragmas).get("unroll") is not None:     # Stage.pragma(iv, "unroll", n)
            self.emit(self.unroll_count_text(dict(s.pragmas)["unroll"]))
        t = self.type_name(s.var.dtype)
        lo = self.expr(s.min)
        hi = self.expr(arith.simplify(s.min + s.extent)) if not E.is_const_int(s.min, 0) \
            else self.expr(s.extent)
        self.emit(f"for ({t} {v} = {lo}; {v} < {hi}; ++{v}) {{")
        self.ind += 1
        old = self._push_range(s.var, Range(s.min, s.extent))
        self.stmt(s.body)
        self.ranges = old
        self.ind -= 1
        self.emit("}")

    def unroll_pragma(self, s):
        self.emit("#pragma unroll")

    def unroll_count_text(self, n) -> str:
        """The compiler hint that unrolls a loop at most `n` times (1: keep it rolled)."""
        return f"#pragma unroll {n}"

    # ------------------------------------------------------------------ vector loops
    def copy_for(self, s) -> bool:
        """Prints a vectorized loop that only copies 16- or 32-bit elements between global
        and shared memory (a tile staged for a GEMM) as 16-byte moves; False when it does
        not fit (registers, `local`, keep their typed vector accesses). Shared buffers are
        declared 16-byte aligned, and the other side's index is proved a multiple of 16
        bytes from the start of an allocation (a view of a device array at an odd offset
        is the caller's). A move from global into shared memory may be asynchronous
        (`async_copy`): the dialect then completes it before the next barrier, which
        thread_sync puts before any read of the tile. A condition the same for every
        element (which threads take part) stays around the moves."""
        body, ext, guard = s.body, s.extent, None
        if isinstance(body, S.IfThenElse) and body.else_case is None and \
                not _mentions(body.cond, s.var):
            guard, body = body.cond, body.then_case
        if not (isinstance(body, S.BufferStore) and isinstance(body.value, E.BufferLoad)
                and "shared" in (body.buffer.scope, body.value.buffer.scope)
                and "local" not in (body.buffer.scope, body.value.buffer.scope)
                and body.value.dtype == body.buffer.dtype
                and dt.bits(body.buffer.dtype) in (16, 32)
                and isinstance(ext, E.IntImm) and E.is_const_int(s.min, 0)
                and len(body.indices) == 1 and len(body.value.indices) == 1
                and self.vector_copy("d", "s") is not None):
            return False
        per = 128 // dt.bits(body.buffer.dtype)     # elements in 16 bytes
        if ext.value % per:
            return False
        ranges = dict(self.ranges)
        ranges[s.var] = Range(E.const(0), ext)
        bases = []
        for idx in (body.indices[0], body.value.indices[0]):
            try:
                lin = arith.linear_coeff(idx, s.var, ranges)
            except arith.NotIndexExpr:
                return False
            if lin is None or lin[0] != 1 or not arith.is_divisible(lin[1], E.const(per), ranges):
                return False
            bases.append(lin[1])
        dst, src = self.bufname(body.buffer), self.bufname(body.value.buffer)
        fill = body.buffer.scope == "shared" and body.value.buffer.scope == "global"
        if guard is not None:
            self.emit(f"if ({self.expr(guard)}) {{")
            self.ind += 1
        for chunk in range(ext.value // per):
            at = [self.offset_text(buf, self.expr(arith.simplify(b + chunk * per)))
                  for b, buf in zip(bases, (body.buffer, body.value.buffer))]
            text = fill and self.async_copy(f"{dst} + {at[0]}", f"{src} + {at[1]}")
            self.emit((text or self.vector_copy(f"{dst} + {at[0]}", f"{src} + {at[1]}")) + ";")
        if guard is not None:
            self.ind -= 1
            self.emit("}")
        return True

    def async_copy(self, dst, src):
        """A statement starting a 16-byte move from global `src` into shared `dst` that
        completes by the next barrier, or None where the dialect has none."""
        return None

    def vector_for(self, s) -> bool:
        """Prints a vectorized loop with W-wide loads/stores; False when it does not fit."""
        W = self.vector_width
        body, ext, uniform = s.body, s.extent, None
        # a condition the same for every lane (which threads have a vector) stays around it
        if isinstance(body, S.IfThenElse) and body.else_case is None and \
                not _mentions(body.cond, s.var):
            uniform, body = body.cond, body.then_case
        if not (isinstance(body, S.BufferStore) and isinstance(ext, E.IntImm)
                and not body.atomic and ext.value % W == 0 and body.buffer.dtype == "float32"
                and E.is_const_int(s.min, 0) and len(body.indices) == 1):
            return False
        ranges = dict(self.ranges)
        ranges[s.var] = Range(E.const(0), ext)

        def contiguous(idx):
            try:
                lin = arith.linear_coeff(idx, s.var, ranges)
            except arith.NotIndexExpr:
                return None
            if lin is None:
                return None
            c, base = lin
            if c != 1:
                return ("other", c)
            if not arith.is_divisible(base, E.const(W), ranges):
                return ("other", c)
            return ("vec", base)

        st = contiguous(body.indices[0])
        if st is None or st[0] != "vec":
            return False
        loads = []

        def collect(e, guard):
            # A load under if_then_else is read only where its condition holds. With a
            # condition the same for every lane (padding rows of a vectorized row), the
            # vector load is made under it; with one that varies across lanes the load
            # stays scalar inside each lane's `?:`, which evaluates the chosen side only.
            if isinstance(e, E.BufferLoad):
                loads.append((e, guard))
            if isinstance(e, E.Select):
                collect(e.cond, guard)
                if guard is not _VARYING and not _mentions(e.cond, s.var):
                    both = (lambda c: c) if guard is None else (lambda c: E.And(guard, c))
                    collect(e.t, both(e.cond))
                    collect(e.f, both(E.Not(e.cond)))
                else:
                    collect(e.t, _VARYING)
                    collect(e.f, _VARYING)
                return
            for name in ("a", "b", "value"):
                x = getattr(e, name, None)
                if isinstance(x, E.Expr):
                    collect(x, guard)
            if isinstance(e, E.Call):
                for x in e.args:
                    collect(x, guard)
        collect(body.value, None)
        vec_loads = []
        for ld, guard in loads:
            info = contiguous(ld.indices[0]) if ld.buffer.dtype == "float32" else None
            if info is not None and info[0] == "vec" and guard is not _VARYING:
                vec_loads.append((ld, info[1], guard))
        comps = "xyzw"
        vt = f"float{W}"
        self.emit("{" if uniform is None else f"if ({self.expr(uniform)}) {{")
        self.ind += 1
        for chunk in range(ext.value // W):
            names = []
            for k, (ld, base, guard) in enumerate(vec_loads):
                nm = self.names(object(), f"v{k}")
                off = self.offset_text(ld.buffer, self.expr(arith.simplify(base + chunk * W)))
                load = self.vector_load(vt, f'{self.bufname(ld.buffer)} + {off}')
                if guard is not None:
                    load = f"({self.expr(guard)}) ? {load} : {self.vector_zero(vt)}"
                self.emit(f"const {vt} {nm} = {load};")
                names.append(nm)
            lanes = []
            for lane in range(W):
                self.var_text[s.var] = str(chunk * W + lane)
                for (ld, _, _), nm in zip(vec_loads, names):
                    self.node_text[id(ld)] = f"{nm}.{comps[lane]}"
                lanes.append(self.expr(body.value))
            self.var_text.pop(s.var, None)
            for ld, _, _ in vec_loads:
                self.node_text.pop(id(ld), None)
            off = self.offset_text(body.buffer, self.expr(arith.simplify(st[1] + chunk * W)))
            self.emit(self.vector_store(vt, f"{self.bufname(body.buffer)} + {off}", lanes) + ";")
        self.ind -= 1
        self.emit("}")
        return True

    # ------------------------------------------------------------------ kernels
    def kernel_signature(self, kernel, params_text) -> str:
        raise NotImplementedError

    def param_text(self, p, written):
        if isinstance(p, S.Buffer):
            const = "" if written else "const "
            return f"{self.global_qual()}{const}{self.mem_type(p.dtype)}* {self.restrict()} " \
                   f"{self.names(p, p.name)}"
        return f"{self.type_name(p.dtype)} {self.names(p, p.name)}"

    def global_qual(self):
        return ""

    def restrict(self):
        return "__restrict__"

    def print_kernel(self, kernel, written) -> str:
        self.begin()
        for p in kernel.params:       # parameter names first: they keep their names
            self.names(p, p.name)
        params = ", ".join(self.param_text(p, p in written) for p in kernel.params)
        self.declare_shared(kernel)
        self.stmt(kernel.body)
        self.end_kernel_body()
        head = self.kernel_signature(kernel, params)
        return head + " {\n" + "\n".join(self.lines) + "\n}\n"

    def declare_shared(self, kernel):
        """The kernel's shared buffers, declared at its top (statically: 48 KiB at most)."""
        check_shared(kernel.name, kernel.shared, MAX_SHARED_BYTES)
        for b in kernel.shared:
            size = arith.simplify(b.shape[0])
            self.emit(self.shared_decl(self.mem_type(b.dtype), self.bufname(b), size.value,
                                       shared_align(b)))

    def end_kernel_body(self):
        """Edits `self.lines`, the kernel's printed body, once it is complete."""

    def note_types(self, func):
        from ...ir.visitor import walk

        def f(n):
            d = getattr(n, "dtype", None)
            if d is None and isinstance(n, (S.BufferStore, S.Allocate)):
                d = n.buffer.dtype
            if d == "float16":
                self.features.add("fp16")
            elif d == "bfloat16":
                self.features.add("bf16")
            elif d == "float64":
                self.features.add("fp64")
        walk(func.body, f)
        for p in func.params:
            if p.dtype == "float16":
                self.features.add("fp16")
            elif p.dtype == "bfloat16":
                self.features.add("bf16")
            elif p.dtype == "float64":
                self.features.add("fp64")

    def preamble(self) -> str:
        return ""

    def print_kernels(self, func) -> str:
        """The source of all kernels of a lowered GPU function."""
        kernels = func.attrs.get("kernels")
        if kernels is None:
            raise BuildError("print_kernels needs a function lowered for a GPU target")
        self.note_types(func)
        written = set().union(*(stored_buffers(k.body) for k in kernels))
        texts = [self.print_kernel(k, written) for k in kernels]
        helpers = "".join(self.helpers.values())
        return self.preamble() + ("\n" + helpers if helpers else "") + "\n" + "\n".join(texts)
