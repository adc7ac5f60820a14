"""Helpers TVM users know from `tvm.contrib`: `cc.create_shared` links object files."""
from . import cc  # noqa: F401
