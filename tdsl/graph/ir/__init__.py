"""The graph IR: typed tensor values (types.py), their nodes and modules (nodes.py), the
operator registry (registry.py) with the operator families that fill it, the text form and
the pictures.

Imports point one way: the families import the registry, the printers import the nodes.
This package imports the families so that every operator is registered, and the printers
so that `Module` has its text form and pictures, before any module of it is used.
"""
from .types import DTYPES, TensorType
from .nodes import Call, Const, DimValues, Expr, Function, Module, Var, topo_order
from . import ops_math, ops_nn, ops_tensor, ops_index, ops_quant, ops_layout, ops_grad, ops_scatter  # noqa: F401  (register the operators)
from . import text, visualize  # noqa: F401  (attach Module's text form and pictures)

__all__ = ["DTYPES", "TensorType", "Call", "Const", "DimValues", "Expr", "Function", "Module", "Var", "topo_order"]
