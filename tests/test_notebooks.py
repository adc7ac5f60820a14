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
