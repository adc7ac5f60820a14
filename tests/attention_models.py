"""ONNX graphs of one attention as torch exports it, for the fused-attention tests."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


def attention_onnx(B, H, M, N, D, E, scale=None, mask=None, mask_input=None, where_nan=False,
                   divide=False):
    """q (B,H,M,D), kt (B,H,D,N), v (B,H,N,E) inputs (sizes may be names); the scores
    scaled by a constant (`divide`: Div by it), plus `mask` (a constant, added as
    Add(mask, s)) or a mask input of shape `mask_input` (added as Add(s, mask)); softmax,
    optionally where(isnan(p), 0, p), then p @ v."""
    f = TensorProto.FLOAT
    nodes, inits = [helper.make_node("MatMul", ["q", "kt"], ["s0"])], []
    ins = [helper.make_tensor_value_info("q", f, (B, H, M, D)), helper.make_tensor_value_info("kt", f, (B, H, D, N)),
           helper.make_tensor_value_info("v", f, (B, H, N, E))]
    last = "s0"
    if scale is not None:
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), "scale"))
        nodes.append(helper.make_node("Div" if divide else "Mul", [last, "scale"], ["s1"]))
        last = "s1"
    if mask is not None:
        inits.append(numpy_helper.from_array(mask, "mask"))
        nodes.append(helper.make_node("Add", ["mask", last], ["s2"]))
        last = "s2"
    elif mask_input is not None:
        ins.append(helper.make_tensor_value_info("mask", f, mask_input))
        nodes.append(helper.make_node("Add", [last, "mask"], ["s2"]))
        last = "s2"
    nodes.append(helper.make_node("Softmax", [last], ["p"], axis=-1))
    last = "p"
    if where_nan:
        inits.append(numpy_helper.from_array(np.array([0.0], np.float32), "zero"))
        nodes += [helper.make_node("IsNaN", ["p"], ["nan"]), helper.make_node("Where", ["nan", "zero", "p"], ["p2"])]
        last = "p2"
    nodes.append(helper.make_node("MatMul", [last, "v"], ["y"]))
    graph = helper.make_graph(nodes, "attn", ins, [helper.make_tensor_value_info("y", f, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
