"""One training step, tdsl beside torch on the CPU, in the same run.

    PYTHONPATH=. python bench/train.py [--models cnn,mlp,resnet18] [--steps 50]
                                       [--resnet-size 224] [--threads 2] [--mcpu znver3]

A step is forward + backward + SGD update at batch 8: for tdsl, `exe.run` of the built
`tdsl.graph.gradient` module (weights fed as inputs, loss and weight gradients out) and the
update `w -= lr * g` in numpy; for torch, the same network from the same ONNX weights run
with `torch.nn.functional`, `loss.backward()` and `torch.optim.SGD.step()`. Both use
`--threads` threads (TDSL_NUM_THREADS, torch.set_num_threads). The networks: the digits CNN
of tutorials/10_training.ipynb (Conv 1->16 3x3, ReLU, 2x2 max pool, Gemm 256->10), the
784-512-256-10 MLP of `tdsl.graph.models.mlp` and the ResNet-18 of
`tdsl.graph.models.resnet18` (Conv + BatchNormalization in inference form: the running
statistics are not trained), each with a SoftmaxCrossEntropyLoss on its logits.

Before timing, one step's loss and gradients are compared with torch's (largest
difference relative to the gradient's largest magnitude). The steps are timed in blocks
taken in turn (tdsl, torch, tdsl, ...; `common.interleaved_samples`) so that both see the
same load on a shared machine; the table gives the median (p50) and p99 of the per-step
times over at least `--steps` steps per side, and tdsl's p50 over torch's. A network whose
gradient tdsl cannot take is printed as skipped, with the GraphError's message. Ends with
the slowest kernels of each tdsl step (`Executor.profile_text`).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np

if __name__ == "__main__":
    _threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "2"
    os.environ["TDSL_NUM_THREADS"] = _threads      # read when tdsl's thread pool starts

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
import tdsl  # noqa: E402
from tdsl.graph import GraphError, models  # noqa: E402

BATCH = 8


def digits_cnn(batch=BATCH, seed=0):
    """The network of tutorials/10_training.ipynb: logits of 8x8 one-channel images."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    w = {"conv.w": (rng.standard_normal((16, 1, 3, 3)) * np.sqrt(2 / 9)).astype(np.float32),
         "conv.b": np.zeros(16, np.float32),
         "fc.w": (rng.standard_normal((10, 256)) * np.sqrt(1 / 256)).astype(np.float32),
         "fc.b": np.zeros(10, np.float32)}
    nodes = [helper.make_node("Conv", ["input", "conv.w", "conv.b"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, "digits_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        [numpy_helper.from_array(v, k) for k, v in w.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


class Side:
    """One framework's training step on one network, with its own copy of the weights."""

    def __init__(self, name, step, weights):
        self.name, self.step, self.weights = name, step, weights


def tdsl_side(model, target, lr, feeds):
    weights, _ = models.trainable(model)
    grad = tdsl.graph.gradient(tdsl.graph.from_onnx(model), wrt=list(weights))
    exe = tdsl.graph.build(tdsl.graph.optimize(grad), target=target)

    def step():
        loss, *grads = exe.run(**feeds, **weights)
        for w, g in zip(weights.values(), grads):
            w -= lr * g
        return loss, grads
    side = Side("tdsl", step, weights)
    side.exe = exe
    return side


def torch_side(model, lr, feeds):
    import torch
    weights, inits = models.trainable(model)
    params = {k: torch.from_numpy(v.copy()) for k, v in inits.items()}
    for k in weights:
        params[k].requires_grad_(True)
    trained = [params[k] for k in weights]
    opt = torch.optim.SGD(trained, lr=lr)
    tfeeds = {k: torch.from_numpy(v) for k, v in feeds.items()}

    def step():
        opt.zero_grad(set_to_none=True)
        loss = models.torch_forward(model, params, tfeeds)
        loss.backward()
        opt.step()
        return loss.detach(), [p.grad for p in trained]
    return Side("torch", step, {k: params[k] for k in weights})


NETWORKS = {
    "cnn": (lambda args: digits_cnn(), (BATCH, 1, 8, 8), 0.1),
    "mlp": (lambda args: models.mlp(batch=BATCH, sizes=(784, 512, 256, 10)), (BATCH, 784), 0.01),
    "resnet18": (lambda args: models.resnet18(batch=BATCH, size=args.resnet_size), None, 1e-5),
}


def compare_one_step(a, b):
    """Largest |tdsl - torch| over each gradient's largest magnitude, and the losses."""
    la, ga = a.step()
    lb, gb = b.step()
    gb = [g.numpy() for g in gb]
    worst = max(float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30)) for x, y in zip(ga, gb))
    return float(la), float(lb), worst


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="cnn,mlp,resnet18")
    p.add_argument("--steps", type=int, default=50, help="timed steps per side, at least")
    p.add_argument("--block", type=int, default=10, help="steps per timed block")
    p.add_argument("--resnet-size", type=int, default=224)
    p.add_argument("--threads", type=int, default=2)
    common.add_target_option(p)
    args = p.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    target = common.target_from(args)
    common.print_target(target)
    print(f"threads: tdsl {os.environ.get('TDSL_NUM_THREADS')}, torch {torch.get_num_threads()}; "
          f"batch {BATCH}; {_uptime()}\n")

    rows, profiles = [], []
    rng = np.random.default_rng(0)
    for name in args.models.split(","):
        make, shape, lr = NETWORKS[name]
        model = models.with_loss(make(args), BATCH)
        shape = shape or (BATCH, 3, args.resnet_size, args.resnet_size)
        feeds = {"input": rng.standard_normal(shape, dtype=np.float32),
                 "labels": rng.integers(0, 10, BATCH).astype(np.int64)}
        try:
            ours = tdsl_side(model, target, lr, feeds)
        except GraphError as e:
            print(f"{name}: skipped, tdsl.graph.gradient cannot take its gradient: {e}")
            continue
        theirs = torch_side(model, lr, feeds)
        la, lb, worst = compare_one_step(ours, theirs)
        print(f"{name}: first step loss tdsl {la:.6g} torch {lb:.6g}; gradients differ by at most "
              f"{worst:.1e} of their largest magnitude")
        blocks = -(-args.steps // args.block)
        samples = common.interleaved_samples([ours.step, theirs.step], blocks, args.block)
        a, b = (np.array(s) * 1e3 for s in samples)
        rows.append((name, len(a), np.percentile(a, 50), np.percentile(a, 99),
                     np.percentile(b, 50), np.percentile(b, 99)))
        finite = all(np.isfinite(w).all() for w in ours.weights.values())
        if not finite:
            print(f"{name}: the weights diverged during timing (lower its learning rate)")
        profiles.append((name, ours.exe.profile_text(number=5, top=8)))

    print(f"\n{'model':10s} {'steps':>5s} {'tdsl p50':>9s} {'p99':>8s} {'torch p50':>10s} {'p99':>8s} "
          f"{'tdsl/torch':>10s}   (ms per step)")
    for name, n, a50, a99, b50, b99 in rows:
        print(f"{name:10s} {n:5d} {a50:9.3f} {a99:8.3f} {b50:10.3f} {b99:8.3f} {a50 / b50:10.2f}")
    print(f"\n{_uptime()}")
    for name, text in profiles:
        print(f"\n{name}: tdsl's slowest kernels in one step\n{text}")


def _uptime():
    try:
        return "uptime: " + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime: unavailable"


if __name__ == "__main__":
    main()
