"""OpenVINO as a third runtime beside onnxruntime in bench/zoo.py (optional: `pip install
openvino`, or the `openvino` extra): an ONNX model compiled for OpenVINO's CPU plugin the
way a latency-bound deployment would (one stream, the latency hint) with the same number
of threads as the other two, and float32 inference precision set explicitly, so that a CPU
with bf16 (AVX512-BF16, AMX) is not compared at half the precision.

(Not named openvino.py: bench/ is first on a bench script's sys.path, and that file would
hide the package.)
"""
from __future__ import annotations

import time


def available() -> str:
    """The OpenVINO version, or "" when it is not installed."""
    try:
        import openvino
    except ImportError:
        return ""
    return openvino.__version__.split("-")[0]


def config(threads: int) -> dict:
    return {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32"}


class OVSession:
    """`model` (an onnx.ModelProto) compiled by OpenVINO's CPU plugin; `run(x)` runs one
    inference on a single-input model and returns its first output (a copy)."""

    def __init__(self, model, threads: int):
        import openvino as ov
        t0 = time.perf_counter()
        core = ov.Core()
        compiled = core.compile_model(core.read_model(model.SerializeToString()), "CPU", config(threads))
        self.compile_s = time.perf_counter() - t0
        self.compiled = compiled
        self.request = compiled.create_infer_request()

    def run(self, x):
        return self.request.infer({0: x})[0]

    def int8_layers(self) -> int:
        """How many convolutions and matrix products of the compiled model run on integers
        (OpenVINO runs a QDQ model's quantized layers in int8 where its low-precision
        transformations match them, else in float32 with the Q/DQ pairs as arithmetic)."""
        n = 0
        for op in self.compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            kind = str(info["layerType"].astype(str)) if "layerType" in info else ""
            prec = str(info["runtimePrecision"].astype(str)) if "runtimePrecision" in info else ""
            if kind in ("Convolution", "FullyConnected", "MatMul", "GroupConvolution") \
                    and prec in ("u8", "i8"):
                n += 1
        return n
