"""Real architectures exported from torch at test time (tdsl.graph.zoo: torchvision models,
BERT and GPT-2 from transformers configs, random weights) import, build and match
onnxruntime. Skipped where the zoo extra (torch, torchvision, transformers) is not
installed; `bench/zoo.py` times the whole list."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")

import tdsl  # noqa: E402
import tdsl.graph as G  # noqa: E402
from tdsl.graph import zoo  # noqa: E402


def _reference(model, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: x})[0]


def _check(model, x):
    exe = G.build(G.optimize(G.from_onnx(model)), target="llvm")
    out = exe.run(x)[0]
    ref = _reference(model, x)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    # the bound: max abs error <= 1e-3 x the output's max magnitude + 1e-4
    err = float(np.abs(out - ref).max())
    assert err <= 1e-3 * float(np.abs(ref).max()) + 1e-4, err
    return exe


# small members of each family: a fire-module CNN, a squeeze-excite mobile net with
# HardSwish, a channel-shuffle net, an encoder and a decoder transformer
@pytest.mark.parametrize("name", ["squeezenet1_1", "mobilenet_v3_small", "shufflenet_v2_x1_0",
                                  "bert", "gpt2"])
def test_zoo_model_matches_onnxruntime(name):
    _check(zoo.export(name), zoo.example_input(name))


def test_zoo_unknown_model_is_named():
    with pytest.raises(tdsl.TdslError, match="no_such_net.*resnet18"):
        zoo.export("no_such_net")
