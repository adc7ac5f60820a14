"""The error hierarchy. Every error a user can cause derives from TdslError."""


class TdslError(Exception):
    """Base of all tdsl errors."""


class ScheduleError(TdslError):
    """A schedule primitive was applied where it cannot hold."""


class LoweringError(TdslError):
    """The schedule could not be lowered to loop IR."""


class BuildError(TdslError):
    """Code generation or compilation failed."""


class ArgumentError(TdslError, ValueError):
    """A compiled module was called with arguments that do not fit its signature."""


class GraphError(TdslError):
    """A graph could not be imported, typed or built."""


class InternalError(TdslError):
    """A bug in tdsl itself: please report it with the code that triggered it."""


class LibraryError(TdslError):
    """A compiled library (an exported `.so` or a disk-cache entry) is missing, truncated,
    altered or not written by tdsl; it is checked before it is mapped into the process."""


class BoundsError(TdslError, IndexError):
    """A kernel met an index outside its buffer (an index read from memory, which every
    build checks, or any access with `bounds_check=True`); the access was skipped and the
    message names the kernel, the buffer, the index and the extent. `module`: the name of
    the module whose kernel met it."""
    module = None
