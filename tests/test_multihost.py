"""Multi-controller JAX: two local CPU processes (jax.distributed on localhost, gloo collectives), each
feeding half of the clients, run the same simulations as one process and get the same numbers."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedjax_clust import make_algorithm, simulate

sys.path.insert(0, str(Path(__file__).parent))
from multihost_cases import CASES, POOLED_CASE, case_task, pooled_task  # noqa: E402

from fedjax_clust.run.driver_options import Evaluation, Output

WORKER = Path(__file__).parent / "multihost_worker.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("multihost")
    port = free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), str(port), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in (0, 1)
    ]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    return out


def one_process(folder, task, name, options, rounds, eval_every):
    """The run's rows written by the two processes, and the same run in this one process."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "completed"
    algo = make_algorithm(name, task, **options)
    return rows, simulate(
        algo, task, rounds=rounds, seed=1, evaluation=Evaluation(eval_every=eval_every), output=Output(progress=False)
    )


# the slow tier (-m 'not slow' leaves it out): every test here reads what the two processes wrote
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name, options", CASES)
def test_two_processes_match_one(two_process_run, name, options):
    rows, want = one_process(two_process_run / name, case_task(), name, options, rounds=6, eval_every=3)
    assert [r["round"] for r in rows] == [r["round"] for r in want.history] == [0, 3, 6]
    for got, ref in zip(rows, want.history):
        assert set(got) == set(ref)
        for key in ref:
            np.testing.assert_allclose(got[key], ref[key], rtol=2e-5, err_msg=key)


def test_a_pooled_population_split_over_two_processes_matches_one(two_process_run):
    name, options = POOLED_CASE
    rows, want = one_process(two_process_run / f"pooled-{name}", pooled_task(), name, options, rounds=4, eval_every=2)
    assert [r["round"] for r in rows] == [r["round"] for r in want.history] == [0, 2, 4]
    for got, ref in zip(rows, want.history):
        assert set(got) == set(ref)
        for key in ref:
            np.testing.assert_allclose(got[key], ref[key], rtol=2e-5, atol=1e-6, err_msg=key)


def test_only_process_zero_writes(two_process_run):
    expected = [name for name, _ in CASES] + [f"pooled-{POOLED_CASE[0]}"]
    assert sorted(p.name for p in two_process_run.iterdir()) == sorted(expected)
