"""Every tutorial notebook runs top to bottom on a fresh kernel (small sizes via
TDSL_TUTORIAL_QUICK); any cell error fails the test."""
import glob
import json
import os

import numpy as np

import pytest

nbformat = pytest.importorskip("nbformat", reason="the test extra installs nbformat")
nbclient = pytest.importorskip("nbclient", reason="the test extra installs nbclient")

HERE = os.path.dirname(__file__)
NOTEBOOKS = sorted(glob.glob(os.path.join(HERE, "..", "tutorials", "*.ipynb")))


def test_there_are_tutorials():
    names = [os.path.basename(p) for p in NOTEBOOKS]
    for expected in ("01_getting_started.ipynb", "02_schedule_primitives.ipynb",
                     "03_optimizing_gemm_cpu.ipynb", "04_gpu_kernels.ipynb", "05_reductions.ipynb", "06_onnx_network.ipynb", "07_aot_export.ipynb", "08_autotuning.ipynb",
                     "09_auto_scheduling.ipynb", "10_training.ipynb", "11_update_definitions.ipynb"):
        assert expected in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: os.path.basename(p))
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("TDSL_TUTORIAL_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": os.path.dirname(path)}})
    check = CHECKS.get(os.path.basename(path))
    if check:       # a last cell that prints the notebook's results for the check
        nb.cells.append(nbformat.v4.new_code_cell(check[0]))
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    if check:
        check[1](json.loads("".join(o["text"] for o in nb.cells[-1].outputs
                                    if o.get("output_type") == "stream")))


def _check_training(r):
    """tdsl's kernels train the digits CNN as torch does from the same initialization:
    the first steps' losses agree to float32 rounding, and the held-out accuracy is
    torch's, both above 90%."""
    if r["torch_loss"] is None:
        pytest.skip("torch (the zoo extra) is not installed: nothing to compare with")
    tl, ref = np.array(r["tdsl_loss"]), np.array(r["torch_loss"])
    assert tl.shape == ref.shape and len(tl) >= 100
    np.testing.assert_allclose(tl[:20], ref[:20], rtol=1e-4, atol=1e-5)
    assert r["tdsl_acc"] > 0.9 and r["torch_acc"] > 0.9, r
    assert abs(r["tdsl_acc"] - r["torch_acc"]) <= 0.02, r
    assert tl[-44:].mean() < tl[:44].mean() / 4      # it learned, not just matched


CHECKS = {"10_training.ipynb": (
    "import json\n"
    "print(json.dumps({'tdsl_loss': tdsl_loss, 'tdsl_acc': tdsl_acc[-1],\n"
    "                  'torch_loss': torch_loss or None,\n"
    "                  'torch_acc': torch_acc[-1] if torch_acc else None}))",
    _check_training)}


OPTIONAL = {"matplotlib": ("03_optimizing_gemm_cpu.ipynb", "08_autotuning.ipynb"),
            "onnx": ("06_onnx_network.ipynb", "10_training.ipynb"),
            "sklearn": ("10_training.ipynb",)}


@pytest.mark.parametrize("package", sorted(OPTIONAL))
def test_a_missing_optional_package_names_the_extra(package, monkeypatch, capsys):
    """The cells that import an optional package, run with the package hidden, say which
    extra to install instead of failing with a traceback."""
    import sys
    monkeypatch.setitem(sys.modules, package, None)      # `import package` now fails
    for name in OPTIONAL[package]:
        nb = nbformat.read(os.path.join(HERE, "..", "tutorials", name), as_version=4)
        cells = [c.source for c in nb.cells if c.cell_type == "code"
                 and f"import {package}\n" in c.source]
        assert cells, name
        for src in cells:
            try:
                exec(compile(src, name, "exec"), {})
            except SystemExit as e:                      # stops the notebook with one line
                message = str(e)
            else:
                message = capsys.readouterr().out
            assert "pip install -e '.[notebooks]'" in message, (name, message)
