"""The walkthrough notebook runs top to bottom (2-step pre-trainings here; 300 in class) and shows its pictures.
Needs nbclient, nbformat and ipykernel (requirements-dev.txt)."""
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def test_walkthrough_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("TACO_NOTEBOOK_STEPS", "2")  # the kernel inherits it: 2-step runs
    nb = nbformat.read(os.path.join(HERE, "walkthrough.ipynb"), as_version=4)
    # the notebook writes runs/ beside taco.py: give it a repository of links in tmp, started in its exercises/
    work = tmp_path / "exercises"
    work.mkdir()
    for name in os.listdir(os.path.dirname(HERE)):
        if name not in ("exercises", "runs", ".git"):
            os.symlink(os.path.join(os.path.dirname(HERE), name), tmp_path / name)
    for name in os.listdir(HERE):
        os.symlink(os.path.join(HERE, name), work / name)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "At initialisation" in text and "After pre-training" in text and "def tc_loss" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3  # curves, cosine, pca
    assert (tmp_path / "runs" / "mini" / "taco-seed0-steps2" / "miniature.json").exists()
