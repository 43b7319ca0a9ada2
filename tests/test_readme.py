"""The README's code examples run as written."""

import pathlib

import pytest

from fedjax_clust.algorithms.registry import unregister_algorithm

README = (pathlib.Path(__file__).parent.parent / "README.md").read_text()


def python_block(section: str) -> str:
    """The first ```python block under the README heading ``section``."""
    start = README.index(f"## {section}\n")
    return README[start:].split("```python\n", 1)[1].split("```", 1)[0]


def test_your_own_algorithm_example_runs():
    scope = {}
    try:
        exec(compile(python_block("Your own algorithm"), "README: Your own algorithm", "exec"), scope)
        assert scope["algo"].hparams["participation"]["clients"] == 5
        assert len(scope["grid"].table) == 2
    finally:
        try:
            unregister_algorithm("shrunk-local")
        except ValueError:
            pytest.fail("the example did not register its algorithm")
