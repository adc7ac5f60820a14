"""Every tutorial notebook runs top to bottom on a fresh kernel (small sizes via
TDSL_TUTORIAL_QUICK); any cell error fails the test."""
import glob
import os

import pytest

nbformat = pytest.importorskip("nbformat", reason="the test extra installs nbformat")
nbclient = pytest.importorskip("nbclient", reason="the test extra installs nbclient")

HERE = os.path.dirname(__file__)
NOTEBOOKS = sorted(glob.glob(os.path.join(HERE, "..", "tutorials", "*.ipynb")))


def test_there_are_tutorials():
    names = [os.path.basename(p) for p in NOTEBOOKS]
    for expected in ("01_getting_started.ipynb", "02_schedule_primitives.ipynb",
                     "03_optimizing_gemm_cpu.ipynb", "04_gpu_kernels.ipynb", "05_reductions.ipynb", "06_onnx_network.ipynb", "07_aot_export.ipynb", "08_autotuning.ipynb",
                     "09_auto_scheduling.ipynb"):
        assert expected in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: os.path.basename(p))
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("TDSL_TUTORIAL_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": os.path.dirname(path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


OPTIONAL = {"matplotlib": ("03_optimizing_gemm_cpu.ipynb", "08_autotuning.ipynb"),
            "onnx": ("06_onnx_network.ipynb",)}


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
