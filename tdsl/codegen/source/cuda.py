"""The CUDA dialect: `__global__` kernels, `threadIdx`/`blockIdx`, `__shared__`,
`__syncthreads()`, `float4` vector accesses and CUDA's half-precision intrinsics.
"""
from __future__ import annotations

from ... import dtype as dt
from ...passes.gpu import shared_align
from ...errors import BuildError
from ...ir.atomic import ATOMIC_DTYPES, atomic_operand
from .base import CFamilyPrinter

_CP_ASYNC = """static __device__ __forceinline__ void tdsl_cp_async16(void *dst, const void *src) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" ::
               "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
#else
  *(uint4 *)dst = *(const uint4 *)src;
#endif
}
static __device__ __forceinline__ void tdsl_cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\\n" ::: "memory");
#endif
}
"""

_FENCE_PROXY_ASYNC = """static __device__ __forceinline__ void tdsl_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
}
"""

_CP_ASYNC_GROUPS = """static __device__ __forceinline__ void tdsl_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\\n" ::: "memory");
#endif
}
template <int N> static __device__ __forceinline__ void tdsl_cp_async_wait_group() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\\n" :: "n"(N) : "memory");
#endif
}
"""


class CUDAPrinter(CFamilyPrinter):
    target = "cuda"
    has_threads = True
    vector_width = 4

    def type_name(self, dtype):
        return {"float32": "float", "float64": "double", "float16": "__half", "int8": "signed char",
                "bfloat16": "__nv_bfloat16",
                "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
                "uint16": "unsigned short", "uint32": "unsigned int",
                "uint64": "unsigned long long", "bool": "bool"}[dtype]

    def helper_qual(self):
        return "static __device__ __forceinline__"

    def atomic_store(self, s):
        """atomicAdd, atomicMin and atomicMax where CUDA has them for the type; a loop of
        atomicCAS on the value's bits otherwise (a float min or max, a product)."""
        d = s.buffer.dtype
        if d not in ATOMIC_DTYPES:
            raise BuildError(f"atomic update of '{s.buffer.name}': {d} has no CUDA atomics; "
                             f"use one of {', '.join(ATOMIC_DTYPES)}")
        ptr = f"&{self.bufname(s.buffer)}[{self.index(s.indices, s.buffer)}]"
        e = self.expr(atomic_operand(s))
        fn = {"add": "atomicAdd", "min": "atomicMin", "max": "atomicMax"}.get(s.atomic)
        if fn == "atomicAdd" or (fn is not None and not dt.is_float(d)):
            if d == "int64":     # CUDA's 64-bit atomics take unsigned (add) or long long
                if fn == "atomicAdd":
                    self.emit(f"atomicAdd((unsigned long long*)({ptr}), "
                              f"(unsigned long long)({e}));")
                    return
            self.emit(f"{fn}({ptr}, ({self.type_name(d)})({e}));")
            return
        if d == "float32":
            self.atomic_cas(s, "atomicCAS", "__float_as_uint", "__uint_as_float",
                            "unsigned int")
        elif d == "float64":
            self.atomic_cas(s, "atomicCAS", "(unsigned long long)__double_as_longlong",
                            "__longlong_as_double", "unsigned long long")
        else:
            bits = "unsigned long long" if dt.bits(d) == 64 else "unsigned int"
            self.atomic_cas(s, "atomicCAS", f"({bits})", f"({self.type_name(d)})", bits)

    def thread_index(self, tag):
        return f"(int){tag}"

    def barrier(self):
        return "__syncthreads();"

    def shared_decl(self, t, name, size, align=16):
        return f"__shared__ __align__({align}) {t} {name}[{max(size, 1)}];"

    def declare_shared(self, kernel):
        # past 48 KiB a block's shared memory must be dynamic: one extern array, each
        # buffer 16-byte aligned at its offset; the launch passes the size and opts in
        if kernel.dynamic_shared_bytes == 0:
            return super().declare_shared(kernel)
        align = max(shared_align(b) for b in kernel.shared)
        self.emit(f"extern __shared__ __align__({align}) unsigned char tdsl_dynamic_shared[];")
        for b, at in kernel.shared_offsets():
            t = self.mem_type(b.dtype)
            self.emit(f"{t} *const {self.bufname(b)} = ({t} *)(tdsl_dynamic_shared + {at});")

    def infinity(self, dtype):
        return "__int_as_float(0x7f800000)" if dtype != "float64" else \
            "__longlong_as_double(0x7ff0000000000000LL)"

    def nan(self, dtype):
        return "__int_as_float(0x7fffffff)" if dtype != "float64" else \
            "__longlong_as_double(0x7fffffffffffffffLL)"

    _FAST = {"exp": "__expf", "log": "__logf", "power": "__powf", "sin": "__sinf",
             "cos": "__cosf", "log2": "__log2f"}

    def math_name(self, name, dtype):
        if dtype == "float32" and name in self._FAST:
            return self._FAST[name]
        return super().math_name(name, dtype)

    def rsqrt_name(self, dtype):
        return "rsqrtf" if dtype == "float32" else "rsqrt"

    def shuffle_down_text(self, x, offset):
        return f"__shfl_down_sync(0xffffffffu, {x}, {offset})"

    def cast_text(self, x, src, dst):
        if dst == "bfloat16":
            return f"__float2bfloat16_rn({super().cast_text(x, src, 'float32')})"
        if src == "bfloat16":
            return super().cast_text(f"__bfloat162float({x})", "float32", dst)
        if dst == "float16":
            return f"__float2half((float)({x}))"
        if src == "float16":
            return super().cast_text(f"__half2float({x})", "float32", dst)
        return super().cast_text(x, src, dst)

    def minmax_text(self, is_max, a, b, dtype):
        if dtype == "float16":
            return f"{'__hmax' if is_max else '__hmin'}({a}, {b})"
        if dtype in ("float32", "float64", "int32", "int64", "uint32", "uint64"):
            return f"{'max' if is_max else 'min'}({a}, {b})"
        return super().minmax_text(is_max, a, b, dtype)

    def popcount_text(self, x, dtype):
        ux = self.unsigned_of(x, dtype)
        if dt.bits(dtype) == 64:
            return f"__popcll({ux})"
        return f"__popc((unsigned int){ux})"

    def clz_text(self, x, dtype):
        ux = self.unsigned_of(x, dtype)
        bits = dt.bits(dtype)
        if bits == 64:
            return f"__clzll((long long){ux})"      # 64 for 0
        return f"(__clz((int)(unsigned int){ux}) - {32 - bits})"

    def classify_text(self, name, x):
        return f"{name}({x})"

    def vector_load(self, vt, ptr):
        return f"*(const {vt}*)({ptr})"

    def vector_store(self, vt, ptr, lanes):
        return f"*({vt}*)({ptr}) = make_{vt}({', '.join(lanes)})"

    def vector_copy(self, dst, src):
        return f"*(uint4 *)({dst}) = *(const uint4 *)({src})"

    def async_copy(self, dst, src):
        # cp.async (sm_80+) moves global to shared memory without staging in registers:
        # the loads of a double-buffered tile's next slice overlap the work on this one
        self.add_helper("tdsl_cp_async16", _CP_ASYNC)
        self.async_copies = True
        return f"tdsl_cp_async16({dst}, {src})"

    def s_Barrier(self, s):
        if s.async_wait is not None:    # a pipeline's: its newest groups stay in flight
            self.add_helper("tdsl_cp_async_commit", _CP_ASYNC_GROUPS)
            self.emit(f"tdsl_cp_async_wait_group<{s.async_wait}>(); " + self.barrier())
            return
        self.barriers.append(len(self.lines))
        super().s_Barrier(s)

    def async_commit(self):
        self.add_helper("tdsl_cp_async_commit", _CP_ASYNC_GROUPS)
        return "tdsl_cp_async_commit();"

    def begin(self, names=None):
        super().begin(names)
        self.barriers, self.async_copies, self.uses_wgmma = [], False, False

    def end_kernel_body(self):
        # thread_sync puts a barrier between any write of a shared buffer and its reads:
        # each thread waiting for its own copies there makes them visible to the block
        if self.async_copies:
            for at in self.barriers:
                self.lines[at] = self.lines[at].replace(self.barrier(),
                                                        "tdsl_cp_async_wait_all(); " + self.barrier())
        # wgmma reads shared memory through the async proxy: what the threads wrote (the
        # generic proxy, cp.async included) is fenced to it before the barrier
        if self.uses_wgmma:
            self.add_helper("tdsl_fence_proxy_async", _FENCE_PROXY_ASYNC)
            self.lines = [ln.replace(self.barrier(), "tdsl_fence_proxy_async(); " + self.barrier())
                          for ln in self.lines]

    def vector_zero(self, vt):
        return f"make_{vt}({', '.join(['0.0f'] * int(vt[-1]))})"

    def preamble(self):
        lines = ["// generated by tdsl (target cuda)"]
        if "fp16" in self.features:
            lines.append("#include <cuda_fp16.h>")
        if "bf16" in self.features:
            lines.append("#include <cuda_bf16.h>")
        return "\n".join(lines) + "\n"

    def kernel_signature(self, kernel, params):
        nt = 1
        for x in kernel.block:
            nt *= x
        return f'extern "C" __global__ void __launch_bounds__({nt}) {kernel.name}({params})'
