"""Helpers TVM users know from `tvm.contrib`: `cc.create_shared` links object files,
`cblas.matmul` is a BLAS GEMM stage (`tdsl.extern`)."""
from . import cc  # noqa: F401
from . import cblas  # noqa: F401
