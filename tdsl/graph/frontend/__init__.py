"""The ONNX frontend: a model read into a graph `Module` (reader.py), with the input shapes
bound (onnx_inputs.py), by converters registered per ONNX operator (registry.py) in family
modules (onnx_ops_*.py) that the reader imports."""
from .reader import from_onnx
from .registry import supported_operators

__all__ = ["from_onnx", "supported_operators"]
