"""Gradients of graph modules: `gradient(mod, wrt)` (reverse.py) and the table of backward
rules (`register_gradient`, registry.py), filled by one module per operator family:
grad_math (elementwise and broadcasting), grad_nn (dense, matmul, conv, pools, reductions,
softmaxes, batch norm), grad_tensor (reshapes, transposes, slices, pads, concatenation)."""
from .registry import GRADIENTS, register_gradient
from . import grad_math, grad_nn, grad_tensor  # noqa: F401  (register the rules)
from .reverse import gradient

__all__ = ["GRADIENTS", "register_gradient", "gradient"]
