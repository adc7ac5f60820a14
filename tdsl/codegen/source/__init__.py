"""C-family source printers for the loop IR: one shared printer, thin dialects (DESIGN.md §8).

`base.CFamilyPrinter` (statements, loops, kernels) over `exprs.CExprPrinter` (expressions)
prints what all targets share; the dialects `cuda.CUDAPrinter`, `opencl.OpenCLPrinter`,
`c.CPrinter` and `c_gpu.CGPUEmuPrinter` only say how a target spells things: kernel and
address-space keywords, thread indices, shared memory, barriers, type names, math
functions, vector loads and stores. A target kind's build step (`tdsl.build`'s registry,
`tdsl/codegen/source_build.py` for the shipped kinds) names the dialect it prints with.

- Kernels (CUDA, OpenCL): `print_kernels(func)` prints every kernel recorded by the
  `split_kernels` pass in one translation unit. A loop bound to a thread tag becomes
  `int v = threadIdx.x;` (`get_local_id(0)`), nested loops on one tag share the index;
  shared buffers are declared once at kernel scope (`__shared__` / `__local`), local ones
  as arrays where they are allocated.
- Plain C (`print_c_function(func)`): one function with the CPU ABI of the LLVM backend
  (buffers as pointers, integer scalars as int64_t, float scalars as double, returns 0),
  compiled by the system C compiler.
- Integer `//` and `%` are Python's floor division: printed as C's `/` and `%` only where
  both operands are proven non-negative (tdsl.arith, under the ranges of the enclosing
  loops); otherwise through small helper functions emitted once per type.
- Vectorized loops: a loop whose body is one float32 store with contiguous, 4-aligned
  indices becomes 4-wide vector loads/stores (CUDA `float4`, OpenCL `vload4/vstore4`);
  other vectorized loops are printed as unrolled loops.
"""
from __future__ import annotations
