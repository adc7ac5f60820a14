"""Networks exported by torch.onnx.export (tdsl.graph.zoo: torchvision, ViT, BERT, GPT-2)
import, build and match onnxruntime, with static shapes and with symbolic batch/sequence
dimensions given at import. Needs the zoo extra (torch, torchvision, transformers)."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.errors import GraphError

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from tdsl.graph import models, zoo  # noqa: E402


def _compare(model, feed, mod=None, extra_outputs=()):
    """tdsl vs onnxruntime on every graph output (plus `extra_outputs`, intermediate
    tensors made outputs): max abs error <= 1e-3 * max|ref|, relative to each output."""
    for name in extra_outputs:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    mod = mod or G.from_onnx(model)
    outs = G.build(G.optimize(mod)).run(*feed.values())
    refs = models.onnxruntime_run(model, feed)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert o.shape == r.shape
        assert float(np.abs(o - r).max()) <= 1e-3 * float(np.abs(r).max()) + 1e-30
    return outs, refs


# small members of each family: a fire-module CNN, a channel-shuffle net, a squeeze-excite
# mobile net with HardSwish, a vision transformer, an encoder and a decoder transformer
@pytest.mark.parametrize("name", ["squeezenet1_1", "shufflenet_v2_x1_0", "mobilenet_v3_small", "vit_b_16",
                                  "bert", "gpt2"])
def test_exported_models_match_onnxruntime(name):
    pytest.importorskip("torchvision")
    pytest.importorskip("transformers")
    model = zoo.export(name)
    extra = []
    if name in ("vit_b_16", "mobilenet_v3_small"):
        # torchvision starts ViT's head at zero and MobileNetV3's logits come out ~1e-9:
        # the classifier's input carries the network's numerics
        extra = [[n for n in model.graph.node if n.op_type == "Gemm"][-1].input[0]]
    outs, refs = _compare(model, {"input": zoo.example_input(name)}, extra_outputs=extra)
    assert float(np.abs(refs[-1]).max()) > 1e-12


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "deeplabv3_mobilenet_v3_large"])
def test_exported_models_built_blocked_match_onnxruntime(name):
    """Optimized for the CPU target: conv chains channel-blocked (squeeze-excite gates,
    HardSwish), and for the segmentation network its dilated convs in bands of live taps and
    its bilinear resize."""
    pytest.importorskip("torchvision")
    model = zoo.export(name)
    x = zoo.example_input(name)
    mod = G.optimize(G.from_onnx(model), target="llvm")
    ops = [m.op for n in mod.main.nodes() if isinstance(n.op, G.Function) for m in n.op.nodes()]
    assert ops.count("nn.conv2d_blocked") >= 20
    out = G.build(mod, target="llvm").run(x)[0]
    ref = models.onnxruntime_run(model, {"input": x})[0]
    assert out.shape == ref.shape
    assert float(np.abs(out - ref).max()) <= 1e-3 * float(np.abs(ref).max())


def test_unknown_zoo_model_is_named():
    with pytest.raises(GraphError, match="no_such_net.*resnet18"):
        zoo.export("no_such_net")


def test_dynamic_bert_at_batch_2_sequence_64():
    pytest.importorskip("torchvision")
    pytest.importorskip("transformers")
    model = zoo.export("bert", dynamic=True)
    with pytest.raises(GraphError, match=r"dims= names \['seq'\].*\['batch', 'sequence'\]"):
        G.from_onnx(model, dims={"batch": 2, "seq": 64})
    mod = G.from_onnx(model, dims={"batch": 2, "sequence": 64})
    assert mod.main.params[0].type.shape == (2, 64)
    # the exported Shape -> Gather -> Concat -> Reshape chains fold away: no shape vectors
    # are computed at run time
    opt = G.optimize(mod, fuse=False)
    assert not [n for n in opt.main.nodes() if n.type.dtype == "int64" and n.type.ndim == 1]
    x = np.random.default_rng(1).integers(0, 1000, (2, 64)).astype(np.int64)
    outs, _ = _compare(model, {"input": x}, mod)
    assert outs[0].shape == (2, 64, 256)


@pytest.mark.parametrize("name", ["bert", "gpt2", "t5_encoder"])
def test_dynamic_transformers_built_once_match_at_every_size(name):
    """Batch and sequence left symbolic: one build runs every size; the position table
    bounds the sequence. From 33 tokens the fused attention's blocked kernel runs
    (shifted row blocks and key tiles), at 1 its variant for one key."""
    pytest.importorskip("transformers")
    model = zoo.export(name, dynamic=True)
    mod = G.from_onnx(model)
    assert [str(d) for d in mod.main.params[0].type.shape] == ["batch", "sequence"]
    exe = G.build(G.optimize(mod))
    rng = np.random.default_rng(4)
    for b, s in [(1, 1), (2, 33), (1, 128), (1, 512)]:
        x = rng.integers(0, 1000, (b, s)).astype(np.int64)
        out = exe.run(x)[0]
        ref = models.onnxruntime_run(model, {"input": x})[0]
        assert out.shape == ref.shape
        assert float(np.abs(out - ref).max()) <= 1e-3 * float(np.abs(ref).max())


def test_gpt2_from_the_dynamo_exporter_with_symbolic_sizes():
    """torch's dynamo exporter writes GPT-2's causal mask with GatherND over symbolic
    positions; built once, it runs at every sequence length."""
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    model = zoo.export("gpt2", dynamic=True, dynamo=True)
    assert "GatherND" in {n.op_type for n in model.graph.node}
    exe = G.build(G.optimize(G.from_onnx(model)))
    rng = np.random.default_rng(6)
    for b, s in [(1, 3), (2, 40)]:
        x = rng.integers(0, 1000, (b, s)).astype(np.int64)
        out = exe.run(x)[0]
        ref = models.onnxruntime_run(model, {"input": x})[0]
        assert out.shape == ref.shape
        assert float(np.abs(out - ref).max()) <= 1e-3 * float(np.abs(ref).max())


def test_dynamic_torchvision_batch_3():
    pytest.importorskip("torchvision")
    model = zoo.export("resnet18", dynamic=True)
    mod = G.from_onnx(model, dims={"batch": 3})
    x = np.random.default_rng(2).standard_normal((3, 3, 224, 224)).astype(np.float32)
    outs, _ = _compare(model, {"input": x}, mod)
    assert outs[0].shape == (3, 1000)
    # the same through shape= (by input)
    assert G.from_onnx(model, shape={"input": (3, 3, 224, 224)}).main.params[0].type.shape == (3, 3, 224, 224)


def _torch_ops():
    F = torch.nn.functional
    return {
        "nearest": lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
        "bilinear": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
        "bilinear_align_corners": lambda x: F.interpolate(x, size=(7, 11), mode="bilinear", align_corners=True),
        "bilinear_down": lambda x: F.interpolate(x, size=(3, 2), mode="bilinear"),
        "bicubic": lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False),
        "einsum": lambda x: torch.einsum("bcij,bckj->bcik", x, x),
        "topk": lambda x: torch.topk(x.flatten(1), 5)[0] + torch.topk(x.flatten(1), 5)[1].float(),
        "argmax": lambda x: torch.argmax(x, dim=1).float(),
        "cumsum": lambda x: torch.cumsum(x, dim=-1),
        "tril_triu": lambda x: torch.tril(x, diagonal=-1) + torch.triu(x, 1),
        "max_pool_indices": lambda x: F.max_pool2d(x, 2, 2, return_indices=True)[1].float(),
        "conv_transpose": lambda x: F.conv_transpose2d(x, torch.ones(3, 2, 3, 3), stride=2, padding=1, output_padding=1),
        "log_softmax": lambda x: F.log_softmax(x, dim=1),
        "norms": lambda x: torch.linalg.vector_norm(x, dim=(2, 3)) + torch.logsumexp(x, dim=1).sum(),
        "index_put": lambda x: x.index_put((torch.tensor([0]), torch.tensor([1])), torch.zeros(4, 5)),
    }


@pytest.mark.parametrize("name", sorted(_torch_ops()))
def test_torch_exported_operators_dynamic_batch(name):
    """The ONNX operators torch emits for these functions, exported with a symbolic batch
    and imported at batch 2."""
    import io

    class Wrap(torch.nn.Module):
        def forward(self, x):
            return _torch_ops()[name](x)
    x = torch.from_numpy(np.random.default_rng(4).standard_normal((2, 3, 4, 5)).astype(np.float32))
    buf = io.BytesIO()
    torch.onnx.export(Wrap(), (x,), buf, opset_version=17, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}}, dynamo=False)
    model = onnx.load_from_string(buf.getvalue())
    _compare(model, {"input": x.numpy()}, G.from_onnx(model, dims={"batch": 2}))


@pytest.mark.parametrize("n_threads", [2, 4])
def test_squeezenet_shared_by_threads(n_threads):
    """The issue's case: one Executor of squeezenet1_1 run from several threads, each on its
    own input, every output right (tests/test_graph_threads.py covers it without torch)."""
    pytest.importorskip("torchvision")
    import threading
    exe = G.build(G.optimize(G.from_onnx(zoo.export("squeezenet1_1"))))
    rng = np.random.default_rng(n_threads)
    xs = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(n_threads)]
    refs = [exe.run(x)[0] for x in xs]
    barrier, wrong, errors = threading.Barrier(n_threads), [0] * n_threads, []

    def body(i):
        try:
            barrier.wait()
            for _ in range(10):
                if not np.allclose(exe.run(xs[i])[0], refs[i], rtol=1e-5, atol=1e-6):
                    wrong[i] += 1
        except BaseException as e:      # noqa: BLE001 - re-raised below
            errors.append(e)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and wrong == [0] * n_threads
