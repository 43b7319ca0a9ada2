"""The Colab notebooks run top to bottom (small sizes, no network: the package is already installed)."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

# every notebook is a kernel of its own (a process: a JAX start-up and cold compiles): the slow tier
NOTEBOOKS = [
    pytest.param(p, marks=pytest.mark.slow)
    for p in sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: getattr(p, "name", None))
def test_notebook_executes(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "Error" not in outputs
    for cell in nb.cells:  # a figure shown is a picture in the notebook, not a line of text
        if cell.cell_type == "code" and "plt.show()" in cell.source:
            assert any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])), cell.source[:80]
    if path.name == "quickstart.ipynb":
        assert "closer to the optima than Local" in outputs
        assert (tmp_path / "quickstart_results" / "convergence.png").exists()
    if path.name == "mnist.ipynb":
        assert "final test accuracy" in outputs
        assert (tmp_path / "mnist_results" / "convergence.png").exists()
    if path.name == "scaling.ipynb":
        assert "Federated-Clustering bytes grow as N^2.00" in outputs
        assert (tmp_path / "scaling_results" / "profile.csv").exists()
        assert "G=8: group size 8" in outputs and (tmp_path / "scaling_results" / "subgroups.csv").exists()


def test_notebooks_exist():
    names = {(p.values[0] if isinstance(p, type(pytest.param(0))) else p).name for p in NOTEBOOKS}
    assert {"quickstart.ipynb", "scaling.ipynb", "mnist.ipynb"} <= names
