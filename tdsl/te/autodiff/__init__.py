"""Reverse-mode differentiation of tensor expressions (TVM's te.gradient).

- `intrinsics`: the derivative of each math intrinsic;
- `expr_grad`: reverse mode over one scalar expression (the adjoint of each read);
- `index_map`: inverting a read's index map, so adjoints are gathers, not scatters;
- `stage`: one stage's input adjoints from its output adjoints (reused per graph operator);
- `driver`: `gradient` over a whole graph of stages."""
from .driver import gradient
from .stage import stage_adjoints, reducer_kind

__all__ = ["gradient", "stage_adjoints", "reducer_kind"]
