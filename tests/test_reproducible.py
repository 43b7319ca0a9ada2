"""Same config, same numbers: the cross-gradient chunk of chunk_size="auto" depends on the config and the
device kind only, is recorded in every result file and checkpoint, and a resume uses it; importing the
package changes no process-wide setting (GPU determinism is turned on by the CLI or an explicit call)."""

import collections
import json
import os
import pathlib
import subprocess
import sys
import warnings

import jax
import numpy as np
import psutil
import pytest

import fedjax_clust
from fedjax_clust import make_algorithm, simulate, synthetic_regression
from fedjax_clust.core.option_groups import gather
from fedjax_clust.parallel import determinism, memory
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output

Memory = collections.namedtuple("Memory", "total available")
REAL_TOTAL = psutil.virtual_memory().total
PACKAGE = pathlib.Path(fedjax_clust.__file__).parent
KW = dict(learning_rate=0.01, momentum=0.9, quantile=0.3, batch_size=3, mesh=None)


def host_memory(monkeypatch, total, available):
    """Pretend the host has ``total`` bytes of which ``available`` are free (what psutil reports)."""
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory(total, available))


def fc_chunk(task, **kw):
    return make_algorithm("federated-clustering", task, **{**KW, **kw}).hparams["chunk_size"]


def test_auto_chunk_does_not_follow_free_memory(monkeypatch):
    """The resolved chunk and the default budget stay put while the free memory changes (the old rule took
    a quarter of the *free* memory: with 1 MiB free, N = 400 got chunks of 16 instead of 262)."""
    task = synthetic_regression(clients_per_cluster=100, seed=0)  # N = 400, D = 10
    chunks, budgets = set(), set()
    for available in (REAL_TOTAL, REAL_TOTAL // 3, 1 << 20):
        host_memory(monkeypatch, REAL_TOTAL, available)
        chunks.add(fc_chunk(task))
        budgets.add(memory.default_memory_budget())
    assert chunks == {(4 << 20) // (4 * 400 * 10)} and budgets == {int(REAL_TOTAL * memory.BUDGET_FRACTION)}
    # another device kind (a 4 MiB host) is another chunk: the budget is 1 MiB -> 1 MiB / (16 x 400 x 10) rows
    host_memory(monkeypatch, 4 << 20, 4 << 20)
    assert fc_chunk(task) == (1 << 20) // (memory.BYTES_PER_ENTRY * 400 * 10) == 16


def test_accelerator_budget_is_the_allocator_capacity():
    """On a GPU the budget is a quarter of ``bytes_limit`` whatever is in use; without statistics, a fixed one."""

    class Device:
        platform = "gpu"

        def __init__(self, in_use):
            self.in_use = in_use

        def memory_stats(self):
            return {"bytes_limit": 60 << 30, "bytes_in_use": self.in_use, "peak_bytes_in_use": self.in_use}

    assert {memory.default_memory_budget(Device(used)) for used in (0, 10 << 30, 59 << 30)} == {15 << 30}

    class Bare(Device):
        def memory_stats(self):
            return None

    assert memory.default_memory_budget(Bare(0)) == memory.FALLBACK_BUDGET


@pytest.mark.parametrize(
    "n, subgroups, want", [(300, 1, None), (1000, 1, 104), (10000, 1, 10), (1000, 4, 419), (8, 3, None)]
)
def test_resolve_chunk_size(n, subgroups, want):
    """``resolve_chunk_size`` on the CPU rule: the cache cap 4 MiB / (4 S D) rows, None when all rows fit
    (S = ceil(N / G); with G groups the rows are G x S)."""
    got = memory.resolve_chunk_size(
        "auto", num_clients=n, model_size=10, subgroups=subgroups, memory_budget=1 << 40, platform="cpu"
    )
    assert got == want
    assert memory.resolve_chunk_size(7, num_clients=n, model_size=10) == 7
    assert memory.resolve_chunk_size(None, num_clients=n, model_size=10) is None


def test_builder_resolves_auto_when_given_the_sizes():
    loss = synthetic_regression(clients_per_cluster=2).example_loss
    fc = fedjax_clust.federated_clustering
    assert fc(loss, learning_rate=0.1, quantile=0.2).hparams["chunk_size"] == "auto"  # resolved when traced
    assert (
        fc(
            loss, learning_rate=0.1, quantile=0.2, num_clients=1000, model_size=10, memory_budget=16 * 1000 * 10 * 3
        ).hparams["chunk_size"]
        == 3
    )
    assert (
        fc(loss, learning_rate=0.1, quantile=0.2, chunk_size=5, num_clients=1000, model_size=10).hparams["chunk_size"]
        == 5
    )
    with pytest.raises(ValueError, match="model_size"):
        fc(loss, learning_rate=0.1, quantile=0.2, num_clients=1000)
    with pytest.raises(ValueError, match="num_clients"):
        fc(loss, learning_rate=0.1, quantile=0.2, num_clients=0, model_size=10)


def recorded_chunks(out):
    """chunk_size as run.json, summary.json and every checkpoint of the run in ``out`` record it."""
    found = {
        "run.json": json.loads((out / "run.json").read_text())["config"]["hparams"]["chunk_size"],
        "summary.json": json.loads((out / "summary.json").read_text())["hparams"]["chunk_size"],
    }
    for checkpoint in sorted((out / "checkpoints").iterdir()):
        progress = json.loads((checkpoint / "progress.json").read_text())
        found[checkpoint.name] = progress["config"]["hparams"]["chunk_size"]
    return found


def test_resolved_chunk_is_recorded_and_resume_uses_it(tmp_path, monkeypatch):
    """The resolved chunk is in run.json, summary.json and every checkpoint. A resume on a device where
    "auto" resolves to another chunk is refused naming the recorded one; given that chunk, it resumes and
    equals the uninterrupted run bit for bit."""
    task = synthetic_regression(clients_per_cluster=100, seed=2)  # N = 400: chunks of 262 on a CPU
    algo = make_algorithm("federated-clustering", task, **KW)
    chunk = algo.hparams["chunk_size"]
    assert chunk == 262
    full = simulate(algo, task, rounds=6, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    out = tmp_path / "run"
    simulate(
        algo,
        task,
        rounds=4,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=str(out)),
        checkpointing=Checkpointing(checkpoint_every=2),
    )
    assert set(recorded_chunks(out).values()) == {chunk} and len(recorded_chunks(out)) == 4
    host_memory(monkeypatch, 4 << 20, 4 << 20)  # "another device": auto now resolves to 16
    elsewhere = make_algorithm("federated-clustering", task, **KW)
    assert elsewhere.hparams["chunk_size"] == 16
    with pytest.raises(ValueError, match=r"chunk_size: 262 -> 16.*pass chunk_size=262 \(--chunk-size 262\)") as e:
        simulate(
            elsewhere,
            task,
            rounds=6,
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False, out_dir=str(out), resume=True),
        )
    assert "\n" not in str(e.value)
    pinned = make_algorithm("federated-clustering", task, chunk_size=chunk, **KW)
    resumed = simulate(
        pinned,
        task,
        rounds=6,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=str(out), resume=True),
    )
    assert resumed.history == full.history
    np.testing.assert_array_equal(np.asarray(resumed.state.params), np.asarray(full.state.params))
    assert set(recorded_chunks(out).values()) == {chunk}


@pytest.mark.skipif(
    jax.default_backend() != "cpu",
    reason="the recorded chunk (262) comes from the CPU's cache rule; an accelerator's comes from its memory budget",
)
def test_cli_resume_adopts_the_recorded_chunk(tmp_path, monkeypatch):
    """``run --resume`` without --chunk-size resumes with the chunk the run recorded, even where "auto"
    now resolves to another one, and ends where the uninterrupted run does."""
    from fedjax_clust.cli.commands import main

    base = [
        "--cpu-devices",
        "1",
        "run",
        "--algorithm",
        "federated-clustering",
        "--clients-per-cluster",
        "100",
        "--batch-size",
        "3",
        "--lr",
        "0.01",
        "--eval-every",
        "2",
        "--no-progress",
    ]
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # main() may add the determinism flag
    assert main(base + ["--rounds", "4", "--out", str(tmp_path / "full")]) == 0
    assert main(base + ["--rounds", "2", "--checkpoint-every", "2", "--out", str(tmp_path / "cut")]) == 0
    host_memory(monkeypatch, 4 << 20, 4 << 20)  # "another device": auto would now resolve to 16
    assert main(base + ["--rounds", "4", "--checkpoint-every", "2", "--resume", "--out", str(tmp_path / "cut")]) == 0
    full, cut = (json.loads((tmp_path / name / "summary.json").read_text()) for name in ("full", "cut"))
    assert cut["hparams"]["chunk_size"] == full["hparams"]["chunk_size"] == 262
    assert (tmp_path / "cut" / "metrics.jsonl").read_text() == (tmp_path / "full" / "metrics.jsonl").read_text()


def test_cli_chunk_size_all_means_every_row():
    """--chunk-size all is chunk_size=None (it used to be dropped as "not given", i.e. read as auto)."""
    from fedjax_clust import make_algorithm, synthetic_regression
    from fedjax_clust.cli.commands import build_parser
    from fedjax_clust.cli.resolve import algo_options as _algo_options

    args = build_parser().parse_args(
        ["run", "--algorithm", "federated-clustering", "--out", "x", "--chunk-size", "all"]
    )
    task = synthetic_regression(num_clusters=2, clients_per_cluster=4)
    assert (
        make_algorithm("federated-clustering", task, **_algo_options("federated-clustering", args)).hparams[
            "chunk_size"
        ]
        is None
    )
    args = build_parser().parse_args(["run", "--algorithm", "federated-clustering", "--out", "x", "--chunk-size", "8"])
    assert _algo_options("federated-clustering", args)["chunk_size"] == 8


def import_flags(env_flags):
    """XLA_FLAGS after ``import fedjax_clust`` in a fresh interpreter started with ``env_flags`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", determinism.ENV_SWITCH)}
    if env_flags is not None:
        env["XLA_FLAGS"] = env_flags
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE.parent)] + [p for p in [env.get("PYTHONPATH")] if p])
    code = "import os; import fedjax_clust; print(repr(os.environ.get('XLA_FLAGS')))"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_import_changes_no_xla_flags():
    assert import_flags(None) == "None"
    assert import_flags("--xla_cpu_enable_fast_math=false") == repr("--xla_cpu_enable_fast_math=false")


def test_cli_turns_gpu_determinism_on(monkeypatch):
    """The fedjax-clust program (main() reading sys.argv) sets up its own process; main([...]) called from
    Python changes no process-wide setting: XLA_FLAGS, the warning hook and JAX's CPU device count stay."""
    from fedjax_clust.cli.commands import main

    monkeypatch.delenv(determinism.ENV_SWITCH, raising=False)
    monkeypatch.setattr(sys, "argv", ["fedjax-clust", "run", "--algorithm", "local", "--rounds", "0"])
    monkeypatch.setattr("fedjax_clust_program.set_cpu_devices", lambda count=None: 0)  # this process's JAX
    other = "--xla_cpu_enable_fast_math=false"
    for before, after in [
        (None, determinism.FLAG),
        (other, f"{other} {determinism.FLAG}"),
        ("--xla_gpu_deterministic_ops=false", "--xla_gpu_deterministic_ops=false"),
    ]:
        if before is None:
            monkeypatch.delenv("XLA_FLAGS", raising=False)
        else:
            monkeypatch.setenv("XLA_FLAGS", before)
        assert main() == 2  # a bad option: after the flag is set
        assert os.environ["XLA_FLAGS"] == after  # the user's own setting wins
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setenv(determinism.ENV_SWITCH, "0")
    assert main() == 2
    assert "XLA_FLAGS" not in os.environ
    monkeypatch.delenv(determinism.ENV_SWITCH)
    hook, devices = warnings.showwarning, jax.config.jax_num_cpu_devices
    assert main(["--cpu-devices", "3", "run", "--algorithm", "local", "--rounds", "0"]) == 2  # from Python
    assert "XLA_FLAGS" not in os.environ and warnings.showwarning is hook
    assert jax.config.jax_num_cpu_devices == devices


def test_flag_parsing(monkeypatch):
    monkeypatch.delenv(determinism.ENV_SWITCH, raising=False)
    for flags, want in [
        ("", False),
        ("--xla_gpu_deterministic_ops", True),
        ("--xla_gpu_deterministic_ops=true", True),
        ("--xla_gpu_deterministic_ops=true --xla_gpu_deterministic_ops=0", False),
        ("--xla_gpu_deterministic_ops_x=true", False),
    ]:
        monkeypatch.setenv("XLA_FLAGS", flags)
        assert determinism.gpu_determinism_requested() is want
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops_x=true")
    assert fedjax_clust.deterministic_xla_flags() == f"--xla_gpu_deterministic_ops_x=true {determinism.FLAG}"
    assert os.environ["XLA_FLAGS"] == "--xla_gpu_deterministic_ops_x=true"  # computed, never set by the library


def test_no_private_jax_module_in_the_package():
    users = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if "jax._src" in path.read_text()]
    assert users == []


def determinism_warnings(caught):
    return [w for w in caught if "deterministic ops" in str(w.message)]


def test_gpu_run_without_determinism_warns_once(monkeypatch):
    """A run on a GPU (faked: JAX's default backend reports "gpu") without the flag warns once per process;
    with the flag, with the switch off, or on a CPU it says nothing."""
    task = synthetic_regression(clients_per_cluster=2)
    algo = make_algorithm("local", task, learning_rate=0.01)
    monkeypatch.delenv(determinism.ENV_SWITCH, raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(determinism, "_warned", [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        simulate(algo, task, rounds=1, output=Output(progress=False))  # the test runs on a CPU (or a GPU with the flag)
        assert determinism_warnings(caught) == [] or jax.default_backend() == "gpu"
    monkeypatch.setattr(determinism, "_warned", [])
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        simulate(algo, task, rounds=1, output=Output(progress=False))
        simulate(algo, task, rounds=1, output=Output(progress=False))
    assert len(determinism_warnings(caught)) == 1
    assert "deterministic_xla_flags()" in str(determinism_warnings(caught)[0].message)
    for env in [("XLA_FLAGS", determinism.FLAG), (determinism.ENV_SWITCH, "0")]:
        monkeypatch.setattr(determinism, "_warned", [])
        monkeypatch.setenv(*env)
        assert determinism.warn_if_nondeterministic_gpu() is False
        monkeypatch.delenv(env[0])
    monkeypatch.setattr(determinism, "_warned", [])
    assert not determinism.warn_if_nondeterministic_gpu("cpu") and not determinism.warn_if_nondeterministic_gpu("tpu")


def test_resolved_chunk_is_the_one_the_round_would_trace():
    """Resolving "auto" when the algorithm is built picks the chunk the traced round picks from its shapes
    (the direct builder, unresolved): one round bit-identical. Under partial participation the chunk is
    sized for the participants, the rows a round sees."""
    task = synthetic_regression(clients_per_cluster=100, seed=4)  # N = 400
    kw = {k: v for k, v in KW.items() if k != "mesh"}
    resolved = make_algorithm("federated-clustering", task, mesh=None, **kw)
    builder = fedjax_clust.federated_clustering
    traced = builder(task.example_loss, **gather(builder, dict(kw, mesh=None)))
    assert (resolved.hparams["chunk_size"], traced.hparams["chunk_size"]) == (262, "auto")
    states = [a.init(task.init_params(jax.random.PRNGKey(0)), task.num_clients) for a in (resolved, traced)]
    (a, _), (b, _) = (
        jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(1)) for algo, state in zip((resolved, traced), states)
    )
    np.testing.assert_array_equal(np.asarray(a.params), np.asarray(b.params))
    big = synthetic_regression(clients_per_cluster=250, seed=4)  # N = 1000: 104 rows; 500 participants: 209
    assert fc_chunk(big) == 104 and fc_chunk(big, participation=0.5) == (4 << 20) // (4 * 500 * 10) == 209
