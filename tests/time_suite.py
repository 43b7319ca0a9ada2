"""How long the test suite takes from a fresh clone, cold and warm: the numbers the README states.

    python tests/time_suite.py --out experiments/results/test-suite/DATE.json
    python tests/time_suite.py --out t.json --only full      # the two .ci/run runs only

Clones the repository's HEAD into a temporary folder and, with one empty kept compilation cache
(``FEDJAX_CLUST_TEST_JAX_CACHE``, tests/conftest.py) shared by the runs of each pair:

* ``full``: ``.ci/run`` twice, as CI runs it (``CI=true``; each run makes its own venv and installs): the first
  run compiles every program (cold), the second reads them from the kept cache (warm);
* ``fast``: ``python -m pytest -q -m "not slow"`` twice in one venv installed once, with a cache of its own.

Each run records its wall seconds, the seconds pytest reports for the tests (collection included, the install
excluded) and the number of tests passed; a run that fails stops the script (exit 1, its log kept). The JSON
names the commit, the date, the CPUs and each cache's key (the jax / jaxlib versions and XLA flags);
``docs/tables.py`` makes the README's sentence from it. Takes about 45 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"^(\d+) passed.* in ([\d.]+)s", re.M)


def passed(log: str) -> tuple[int, float]:
    """(tests passed, seconds) from pytest's last summary line in ``log``; ValueError without one."""
    found = SUMMARY.findall(log)
    if not found:
        raise ValueError("no pytest summary line ('N passed ... in S s') in the log")
    count, seconds = found[-1]
    return int(count), float(seconds)


def timed(argv: list, cwd: pathlib.Path, env: dict, log: pathlib.Path) -> dict:
    """Run ``argv`` in ``cwd`` with its output in ``log``: its wall seconds, the tests' seconds and count."""
    start = time.perf_counter()
    with open(log, "w") as sink:
        code = subprocess.call(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    text = log.read_text()
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {code}); its output: {log}")
    tests, seconds = passed(text)
    return {"wall_seconds": round(wall, 1), "test_seconds": seconds, "tests": tests}


def pair(argv: list, cwd: pathlib.Path, env: dict, cache: pathlib.Path, name: str, logs: pathlib.Path) -> dict:
    """The cold and the warm run of ``argv`` sharing the kept cache folder ``cache`` (empty at the start)."""
    cache.mkdir()
    env = {**env, "FEDJAX_CLUST_TEST_JAX_CACHE": str(cache)}
    runs = {}
    for which in ("cold", "warm"):
        print(f"{name} ({which}): {' '.join(argv)}", file=sys.stderr, flush=True)
        runs[which] = timed(argv, cwd, env, logs / f"{name}-{which}.log")
        print(f"  {runs[which]}", file=sys.stderr, flush=True)
    runs["cache_key"] = [p.name for p in cache.iterdir()]  # the jax / jaxlib / XLA_FLAGS the runs compiled for
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--only", choices=("full", "fast"), help="one pair of runs only")
    args = parser.parse_args(argv)
    commit = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="fedjax-clust-time-suite-"))
    clone = scratch / "clone"
    subprocess.check_call(["git", "clone", "-q", str(ROOT), str(clone)])
    env = {**os.environ, "CI": "true"}
    env.pop("FEDJAX_CLUST_TEST_JAX_CACHE", None)
    record = {
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    if args.only in (None, "full"):
        record["full"] = pair(["bash", ".ci/run"], clone, env, scratch / "cache-full", "full", scratch)
    if args.only in (None, "fast"):
        venv = scratch / "venv"
        subprocess.check_call([sys.executable, "-m", "venv", str(venv)])
        python = str(venv / "bin" / "python")
        subprocess.check_call([python, "-m", "pip", "install", "-q", ".[test]"], cwd=clone)
        record["fast"] = pair(
            [python, "-m", "pytest", "-q", "-m", "not slow"], clone, env, scratch / "cache-fast", "fast", scratch
        )
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out} (logs in {scratch})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
