"""The autotuner's error: a mistake in a template, a task or a tuning call. Every module
of the package raises it, so it sits below all of them."""
from __future__ import annotations

from ..errors import TdslError


class AutotuneError(TdslError):
    """A mistake in a template, a task or a tuning call."""
