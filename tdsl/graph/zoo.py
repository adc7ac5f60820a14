"""Real architectures exported from torch to ONNX at call time (random weights, nothing is
downloaded): the torchvision classification models and small transformers built from
their configs, as people's own exported networks look. Needs the `zoo` extra (torch,
torchvision, transformers); each model's builder imports only what it uses.

    model = tdsl.graph.zoo.export("resnet18")          # an onnx.ModelProto, batch 1, 224x224
    model = tdsl.graph.zoo.export("bert", dynamic=True) # batch and sequence left symbolic
"""
from __future__ import annotations

import io
from typing import Callable, Dict, Tuple

import numpy as np

from ..errors import GraphError

OPSET = 17


def _torchvision(name, **kw):
    def make():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw), ((1, 3, 224, 224), "float32")
    return make


def _segmentation(name):
    """A torchvision segmentation network (dilated convs in its backbone and head, a bilinear
    resize back to the input size) returning its "out" map; no backbone weights are fetched."""
    def make():
        import torchvision
        net = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None,
                                                             num_classes=21)
        return _output(net, "out"), ((1, 3, 224, 224), "float32")
    return make


def _output(model, key):
    """A torch module returning entry `key` of `model`'s dict output."""
    import torch

    class Output(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(x)[key]
    return Output()


def _bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                     vocab_size=30522, max_position_embeddings=512)
    return _first_output(BertModel(cfg)), ((1, 128), "int64")


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_embd=256, n_layer=2, n_head=4, n_positions=512, vocab_size=50257, use_cache=False)
    return _first_output(GPT2LMHeadModel(cfg)), ((1, 128), "int64")


def _encoder(config_cls, model_cls, **kw):
    """A small transformers encoder of one family (random weights) at sequence 128."""
    def make():
        import transformers
        cfg = getattr(transformers, config_cls)(**kw)
        return _first_output(getattr(transformers, model_cls)(cfg)), ((1, 128), "int64")
    return make


def _t5_encoder():
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(d_model=256, d_kv=64, d_ff=1024, num_layers=4, num_heads=4, vocab_size=32128)
    return _first_output(T5EncoderModel(cfg)), ((1, 128), "int64")


def whisper_encoder(d_model=256, layers=2, heads=4, ffn=1024):
    """Whisper's audio encoder (two convs over 80 mel bins, then attention) on 30 s of
    frames, as the model takes them; the zoo's at its defaults (Whisper-tiny: 384, 4, 6,
    1536; -base: 512, 6, 8, 2048)."""
    import torch
    from transformers import WhisperConfig, WhisperModel
    cfg = WhisperConfig(d_model=d_model, encoder_layers=layers, encoder_attention_heads=heads,
                        encoder_ffn_dim=ffn, decoder_layers=1, decoder_attention_heads=heads,
                        decoder_ffn_dim=ffn, num_mel_bins=80)
    enc = WhisperModel(cfg).get_encoder()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = enc

        def forward(self, features):
            return self.m(features, return_dict=False)[0]
    return Encoder(), ((1, 80, 3000), "float32")


def _first_output(model):
    """A transformers model as a torch module of the token ids returning its first output."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            # an explicit mask: without one, transformers looks for packed sequences with
            # torch.diff, which the ONNX exporter does not know
            return self.m(input_ids=ids, attention_mask=torch.ones_like(ids), return_dict=False)[0]
    return FirstOutput()


# name -> builder returning (torch module, (input shape, input dtype))
MODELS: Dict[str, Callable[[], Tuple[object, tuple]]] = {
    "resnet18": _torchvision("resnet18"),
    "mobilenet_v2": _torchvision("mobilenet_v2"),
    "mobilenet_v3_small": _torchvision("mobilenet_v3_small"),
    "squeezenet1_1": _torchvision("squeezenet1_1"),
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "shufflenet_v2_x1_0": _torchvision("shufflenet_v2_x1_0"),
    "regnet_y_400mf": _torchvision("regnet_y_400mf"),
    "resnet50": _torchvision("resnet50"),
    "densenet121": _torchvision("densenet121"),
    "convnext_tiny": _torchvision("convnext_tiny"),
    "vit_b_16": _torchvision("vit_b_16"),
    "deeplabv3_mobilenet_v3_large": _segmentation("deeplabv3_mobilenet_v3_large"),
    "bert": _bert,
    "gpt2": _gpt2,
    "distilbert": _encoder("DistilBertConfig", "DistilBertModel", dim=256, n_layers=4, n_heads=4,
                           hidden_dim=1024),
    "roberta": _encoder("RobertaConfig", "RobertaModel", hidden_size=256, num_hidden_layers=4,
                        num_attention_heads=4, intermediate_size=1024, max_position_embeddings=514),
    "albert": _encoder("AlbertConfig", "AlbertModel", hidden_size=256, num_hidden_layers=4,
                       num_attention_heads=4, intermediate_size=1024, embedding_size=128),
    "t5_encoder": _t5_encoder,
    "whisper_encoder": whisper_encoder,
}


def example_input(name, seed=0):
    """A random input for model `name` (token ids below 1000 for the transformers)."""
    shape, dtype = _spec(name)[1]
    rng = np.random.default_rng(seed)
    if dtype == "int64":
        return rng.integers(0, 1000, shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


_SPECS: Dict[str, tuple] = {}


def _spec(name):
    if name not in MODELS:
        raise GraphError(f"zoo: unknown model '{name}'; the models are {', '.join(MODELS)}")
    if name not in _SPECS:
        _SPECS[name] = MODELS[name]()
    return _SPECS[name]


def seeded_module(name: str, seed: int = 0):
    """Model `name` as the torch module `export(name, seed=seed)` traces: eval mode, weights
    drawn from `seed`, so its outputs are the exported model's reference."""
    import torch
    torch.manual_seed(seed)
    _SPECS.pop(name, None)
    module, _ = _spec(name)
    module.eval()
    with torch.no_grad():
        # parameters initialised to zero (ViT's classifier, class token) get small random
        # values: a network whose output is its zero bias would match anything
        for p in module.parameters():
            if not p.any():
                p.normal_(0.0, 0.02)
    return module


def export(name: str, dynamic: bool = False, seed: int = 0, dynamo: bool = False):
    """Model `name` exported by `torch.onnx.export` (opset 17, eval mode, weights from
    `seed`) as an `onnx.ModelProto`. `dynamic=True` leaves the batch (and the sequence
    of the transformers) symbolic, as exports for serving do. `dynamo=True` exports with
    torch's dynamo exporter (opset 18) instead of the TorchScript one."""
    import onnx
    import torch
    module = seeded_module(name, seed)
    _, (shape, dtype) = _spec(name)
    x = torch.from_numpy(example_input(name, seed))
    axes = None
    if dynamic:
        axes = {"input": {0: "batch"} if dtype == "float32" else {0: "batch", 1: "sequence"},
                "output": {0: "batch"}}
    if dynamo:
        shapes = None
        if dynamic:
            shapes = ({ax: torch.export.Dim(d, max=4096 if d == "batch" else 512)
                       for ax, d in axes["input"].items()},)
        prog = torch.onnx.export(module, (x,), dynamo=True, input_names=["input"], output_names=["output"],
                                 dynamic_shapes=shapes, opset_version=18, verbose=False)
        return prog.model_proto
    buf = io.BytesIO()
    # traced with gradients on: under no_grad torchvision's attention takes a fused fast
    # path (aten::_native_multi_head_attention) that has no ONNX export
    torch.onnx.export(module, (x,), buf, opset_version=OPSET, input_names=["input"],
                      output_names=["output"], dynamic_axes=axes, dynamo=False)
    return onnx.load_from_string(buf.getvalue())
