"""Exports the small torch models used by tests/test_graph.py (run once; the .onnx files
are committed, so the tests do not need torch):

    pip install torch==2.13.0 && python tests/models/export_torch_models.py

torch_cnn.onnx: conv-bn-relu blocks, max pool, a residual add, `x.view(x.size(0), -1)`
(a Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain) and a linear layer, exported in
eval mode (BatchNorm folded by torch) with do_constant_folding=False, so the chain stays.
torch_attention.onnx: one transformer encoder layer written with `.view(B, T, H, D)` /
`.transpose` / `.size()` calls, LayerNorm (opset 17 LayerNormalization) and GELU (Erf).
"""
import os

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.c2 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.c3 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = self.pool(self.c1(x))
        x = x + self.c2(x)
        x = torch.relu(self.c3(x))
        x = x.view(x.size(0), -1)
        return self.fc(x)


class Attention(nn.Module):
    def __init__(self, d=64, h=4, ff=128):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)

    def forward(self, x):
        B, T, D = x.size()
        q, k, v = self.qkv(x).split(D, dim=-1)
        q = q.view(B, T, self.h, D // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, D // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, D // self.h).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-2, -1) / (D // self.h) ** 0.5, dim=-1)
        o = (a @ v).transpose(1, 2).contiguous().view(B, T, D)
        x = self.ln1(x + self.proj(o))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


def main():
    torch.manual_seed(0)
    for name, model, shape in (("torch_cnn", SmallCNN(), (1, 3, 16, 16)),
                               ("torch_attention", Attention(), (1, 16, 64))):
        model.eval()
        path = os.path.join(HERE, f"{name}.onnx")
        torch.onnx.export(model, (torch.randn(*shape),), path, dynamo=False, opset_version=17,
                          do_constant_folding=False, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
