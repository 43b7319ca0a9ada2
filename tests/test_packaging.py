"""The distribution: an sdist and a wheel build from the repository (no network: --no-isolation), pass
``twine check``, and the wheel installed into a fresh virtual environment runs the first command."""

import os
import pathlib
import site
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_and_sdist_build_check_and_the_wheel_runs_the_first_command(tmp_path):
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "-o", str(dist), str(ROOT)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "fedjax_clust/cli/commands.py" in names and not any(n.startswith(("tests/", "experiments/")) for n in names)
    assert "fedjax_clust/cost/measured_efficiency.json" in names  # what device projections read
    # a fresh environment that sees this one's packages (no download) through a .pth file, the package only
    # from the wheel: this works whether the tests run in a venv, a conda environment or a system Python
    # (venv --system-site-packages would see the *base* interpreter's packages, not a venv's)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    venv_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []  # a venv ignores the user's site
    ours = [p for p in site.getsitepackages() + user if os.path.isdir(p)]
    lines = [f"import site; site.addsitedir({p!r})" for p in ours]  # addsitedir: their own .pth files too
    pathlib.Path(venv_site, "_running_environment.pth").write_text("\n".join(lines) + "\n")
    # --ignore-installed: this environment's copy (seen through the .pth file) must not satisfy it
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheels[0])],
        check=True,
        capture_output=True,
    )
    where = subprocess.run(
        [str(python), "-c", "import fedjax_clust; print(fedjax_clust.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv) in where  # the wheel's copy, not this checkout's
    out = tmp_path / "first"
    first = subprocess.run(
        [str(venv / "bin" / "fedjax-clust"), "compare", "--rounds", "3", "--out", str(out), "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert (out / "results.json").exists() and (out / "convergence.png").exists()
