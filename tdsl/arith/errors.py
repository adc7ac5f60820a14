"""The error of the index algebra: its own module, so that the package facade and the
modules it loads lazily (`core`, `convert`) all import it from below."""
from __future__ import annotations

from ..errors import InternalError


class NotIndexExpr(InternalError):
    """The expression is not an integer/boolean index expression (it reads memory, uses
    floats or calls a function); callers catch this and leave the expression alone."""

    def __init__(self, expr=None):
        self.expr = expr
        super().__init__("not an integer index expression")

    def __str__(self):
        return f"not an integer index expression: {self.expr}"
