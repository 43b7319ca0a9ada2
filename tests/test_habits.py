"""The habits CI holds the package to (issue 34): ruff's lint and format check clean on the package (rules in
pyproject.toml's [tool.ruff]), and the type checker's "no new errors" rule against its committed baseline
(.ci/typecheck.py, mypy with [tool.mypy])."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ["fedjax_clust", "fedjax_clust_program"]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean_on_the_package(command):
    done = subprocess.run([sys.executable, "-m", "ruff", *command, *PACKAGE], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.slow  # mypy over the package: about a minute on 2 cores
def test_the_type_checker_finds_no_error_outside_the_baseline():
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "typecheck.py")], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "no new errors" in done.stdout
