"""ONNX backend node test cases for the operators tdsl.graph supports (non-expanded):
`onnx.backend.test.case.node.collect_testcases()` builds them in memory."""
from __future__ import annotations

import numpy as np

SUPPORTED = ("Conv ConvTranspose Gemm MatMul Add Sub Mul Div Pow Relu LeakyRelu Sigmoid Tanh Erf "
             "Exp Log Sqrt Clip Softmax LayerNormalization BatchNormalization MaxPool AveragePool "
             "GlobalAveragePool ReduceMean ReduceSum ReduceMax ReduceMin Reshape Flatten Transpose Concat Split "
             "Slice Squeeze Unsqueeze Gather Pad Identity Dropout Constant Shape "
             "HardSigmoid HardSwish Mod IsNaN IsInf GatherElements ReduceSumSquare ReduceL1 ReduceL2 "
             "ReduceLogSum ReduceLogSumExp ReduceProd ArgMax ArgMin CumSum TopK Trilu ScatterND ScatterElements GatherND "
             "Resize Einsum "
             "Cast Equal Less Greater LessOrEqual GreaterOrEqual Not And Or Where Expand Range LogSoftmax "
             "QuantizeLinear DequantizeLinear QLinearConv QLinearMatMul ConvInteger MatMulInteger Round").split()

# element types tdsl does not have (bfloat16, 2/4-bit integers, 8/4-bit floats, strings):
# these cases raise GraphError naming the dtype
_NO_DTYPE = ("bfloat16", "int4", "int2", "float8", "float4", "e8m0", "e4m3", "e5m2", "string")


def unsupported_dtype(name):
    return any(t in name.lower() for t in _NO_DTYPE)


def cases():
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        allc = collect_testcases()
    out = []
    for c in allc:
        if "expanded" in c.name:
            continue
        ops = {n.op_type for n in c.model.graph.node}
        if len(ops) == 1 and ops <= set(SUPPORTED):
            out.append(c)
    return out


def _array(v):
    """Some cases (Cast) hold onnx.TensorProto values instead of numpy arrays."""
    import onnx
    if isinstance(v, onnx.TensorProto):
        from onnx import numpy_helper
        return numpy_helper.to_array(v)
    return v


def _ort_outputs(case, inputs):
    import onnxruntime as ort
    sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in case.model.graph.input][:len(inputs)]
    return sess.run(None, dict(zip(names, inputs)))


def run_case(case, optimize=True, rtol=1e-3, atol=1e-7, target="llvm", reference="onnx"):
    """rtol/atol: the defaults of onnx.backend.test. reference="onnxruntime" compares with
    onnxruntime's outputs instead of the case's (where onnx's reference implementation and
    onnxruntime disagree, tdsl follows onnxruntime)."""
    # imports, optimizes, builds and runs one case; raises AssertionError on a mismatch
    import tdsl.graph as G
    from tdsl.errors import GraphError
    data_sets = [([_array(v) for v in ins], [_array(v) for v in outs]) for ins, outs in case.data_sets]
    if reference == "onnxruntime":
        data_sets = [(ins, _ort_outputs(case, ins)) for ins, _ in data_sets]
    inputs0 = data_sets[0][0]
    names0 = [i.name for i in case.model.graph.input][:len(inputs0)]
    bind = {}
    try:
        mod = G.from_onnx(case.model)
    except GraphError as e:
        if "known at compile time" not in str(e):
            raise
        # shape/axes/pads inputs: bind the integer inputs of the case as constants
        # (and float parameter vectors after the data, such as Resize's roi and scales)
        bind = {n: v for k, (n, v) in enumerate(zip(names0, inputs0))
                if np.asarray(v).dtype.kind in "iub" or np.asarray(v).ndim == 0
                or (k > 0 and np.asarray(v).ndim == 1 and case.model.graph.node[0].op_type == "Resize")}
        mod = G.from_onnx(case.model, bind=bind)
    if optimize:
        mod = G.optimize(mod)
    exe = G.build(mod, target=target)
    for inputs, expected in data_sets:
        names = [i.name for i in case.model.graph.input][:len(inputs)]
        feed = dict(zip(names, inputs))
        names = [n for n in names if n not in bind]
        got = exe.run(*[feed[n] for n in names])
        assert len(got) >= len(expected), f"{len(got)} outputs, expected {len(expected)}"
        for g, e in zip(got, expected):
            e = np.asarray(e)
            assert g.shape == e.shape, f"shape {g.shape} != {e.shape}"
            assert g.dtype == e.dtype, f"dtype {g.dtype} != {e.dtype}"
            if e.dtype.kind == "f":
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
            else:
                np.testing.assert_array_equal(g, e)
