"""bench/generic_ab.py: its `per-group` side builds every group with a kernel of its own,
and only within the block."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
sys.path.insert(0, os.path.dirname(__file__))
import generic_ab  # noqa: E402
from tdsl.graph.strategy.cpu import generic  # noqa: E402

from test_graph_generic import _bn, _check_batches, _dense_block, _steps_by_ops  # noqa: E402
from test_graph_conv_fast import Net  # noqa: E402


def _convs(side):
    net = Net(("batch", 24, 14, 14), seed=1)
    block = _dense_block(net, net.node("Relu", ["x"]), 24, layers=3, growth=12, bottleneck=32)
    out = net.conv(net.node("Relu", [_bn(net, block, 60)]), 60, 16, bias=False)
    if side == "per-group":
        with generic_ab.per_group():
            exe = _check_batches(net, out, (2, 1))
    else:
        exe = _check_batches(net, out, (2, 1))
    return _steps_by_ops(exe)[("nn.conv2d", "nn.bias_add", "nn.relu")]


def test_per_group_side_builds_a_kernel_per_group():
    find = generic.find
    per_group, shared = _convs("per-group"), _convs("generic")
    assert generic.find is find
    assert len(per_group) == len(shared) == 3
    assert len({id(k) for k, _ in per_group}) == 3
    assert len({id(k) for k, _ in shared}) == 1
