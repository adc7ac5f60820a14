"""Runtime: compiled modules (call checks, timing, export) and their loaders."""
from .module import Module, ProfileResult  # noqa: F401
from .aot import load_module  # noqa: F401
