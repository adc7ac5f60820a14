"""Gradients of graph modules: `gradient(mod, wrt)` (reverse.py) and the table of backward
rules (`register_gradient`, registry.py), filled by one module per operator family:
grad_math (elementwise and broadcasting), grad_conv (convs and transposed convs, grouped
too), grad_nn (dense, matmul, pools, reductions, softmaxes, batch and layer norm),
grad_tensor (reshapes, transposes, slices, pads, concatenation, gathers, running sums)."""
from .registry import GRADIENTS, register_gradient
from . import grad_conv, grad_math, grad_nn, grad_tensor  # noqa: F401  (register the rules)
from .reverse import gradient

__all__ = ["GRADIENTS", "register_gradient", "gradient"]
