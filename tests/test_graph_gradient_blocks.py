"""tdsl.graph.gradient of the blocks the zoo's networks are made of, exported from torch,
against torch autograd: a DistilBERT-like transformer block (embedding lookups, layer
norms, attention with batched matmuls and softmax, erf GELU) and a MobileNet-style
depthwise block (grouped convs, batch norms, ReLU6, hard swish, squeeze-excitation with
hard sigmoid, average pooling)."""
import io

import numpy as np
import pytest

import tdsl

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


class TransformerBlock(nn.Module):
    def __init__(self, vocab=40, d=16, heads=2, ff=32, seq=6, classes=5):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.ln0, self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.f1, self.f2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.cls = nn.Linear(d, classes)
        self.heads = heads

    def forward(self, ids, labels):
        b, s = ids.shape
        x = self.ln0(self.emb(ids) + self.pos(torch.arange(s)))
        d = x.shape[-1]
        hd = d // self.heads

        def split(t):
            return t.reshape(b, s, self.heads, hd).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5, dim=-1)
        x = self.ln1(x + self.o((att @ v).transpose(1, 2).reshape(b, s, d)))
        x = self.ln2(x + self.f2(F.gelu(self.f1(x))))
        return F.cross_entropy(self.cls(x.mean(1)), labels)


class DepthwiseBlock(nn.Module):
    def __init__(self, c=4, e=12, classes=5):
        super().__init__()
        self.expand, self.bn0 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
        self.dw, self.bn1 = nn.Conv2d(e, e, 3, stride=2, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
        self.se1, self.se2 = nn.Conv2d(e, 4, 1), nn.Conv2d(4, e, 1)
        self.grouped = nn.Conv2d(e, e, 3, padding=1, groups=3)
        self.up = nn.ConvTranspose2d(e, c, 2, stride=2)
        self.project, self.bn2 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.fc = nn.Linear(c * 4 * 4, classes)

    def forward(self, x, labels):
        h = F.relu6(self.bn0(self.expand(x)))
        h = F.hardswish(self.bn1(self.dw(h)))
        s = F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(h, 1)))))
        h = self.grouped(h * s)
        h = self.bn2(self.project(self.up(h))) + x
        h = F.avg_pool2d(h, 3, stride=2, padding=1, count_include_pad=False)
        return F.cross_entropy(self.fc(h.flatten(1)), labels)


def _export(module, inputs, names):
    buf = io.BytesIO()
    # without constant folding the initializers keep the parameters' names (a Linear's
    # weight stays a Transpose of it)
    torch.onnx.export(module, inputs, buf, opset_version=17, input_names=names, output_names=["loss"],
                      dynamo=False, do_constant_folding=False)
    return onnx.load_from_string(buf.getvalue())


def _check(module, inputs, names, rtol):
    model = _export(module, inputs, names)
    params = dict(module.named_parameters())
    assert set(params) <= {i.name for i in model.graph.initializer}
    gmod = tdsl.graph.gradient(tdsl.graph.from_onnx(model), wrt=list(params))
    exe = tdsl.graph.build(tdsl.graph.optimize(gmod), target="llvm")
    feeds = {n: v.numpy() for n, v in zip(names, inputs)}
    loss, *grads = exe.run(**feeds, **{k: p.detach().numpy() for k, p in params.items()})
    ref = module.double()
    for p in ref.parameters():
        p.grad = None
    tl = ref(*[v.double() if v.is_floating_point() else v for v in inputs])
    tl.backward()
    np.testing.assert_allclose(loss, float(tl.detach()), rtol=1e-5)
    wants = {name: p.grad.numpy() for name, p in ref.named_parameters()}
    # a gradient that is 0 in exact arithmetic (the key projection's bias: softmax ignores
    # a shift shared by all keys) is measured against the block's largest gradient
    top = max(np.abs(w).max() for w in wants.values())
    for (name, want), g in zip(wants.items(), grads):
        assert g.shape == want.shape, name
        err = np.abs(g - want).max() / max(np.abs(want).max(), 1e-3 * top)
        assert err < rtol, f"{name}: {err:.1e} of its largest magnitude off torch's float64 gradient"
    return len(grads)


def test_transformer_block_weight_gradients_match_torch():
    torch.manual_seed(0)
    module = TransformerBlock()
    with torch.no_grad():
        # distinct norms: the exporter shares equal initializers (every fresh LayerNorm's)
        for ln in (module.ln0, module.ln1, module.ln2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-0.2, 0.2)
    ids = torch.tensor([[1, 5, 1, 7, 0, 39], [3, 3, 3, 2, 9, 1], [12, 0, 8, 8, 30, 5]])
    labels = torch.tensor([0, 3, 4])
    # every parameter, the embedding tables' repeated ids accumulated
    assert _check(module, (ids, labels), ["ids", "labels"], 1e-4) == 22


def test_depthwise_block_weight_gradients_match_torch():
    torch.manual_seed(1)
    module = DepthwiseBlock()
    with torch.no_grad():
        for bn in (module.bn0, module.bn1, module.bn2):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    module.eval()                      # batch norm in inference form, as the graph has it
    x = torch.randn(2, 4, 8, 8)
    labels = torch.tensor([1, 4])
    assert _check(module, (x, labels), ["x", "labels"], 1e-4) == 19
