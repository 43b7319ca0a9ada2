"""A third-party algorithm registers from outside the package -- in Python, and for the command line as an
installed package's entry point -- and then runs everywhere a built-in one does: make_algorithm, simulate,
partial participation, attackers, sweeps, the CLI's run and sweep. The plugin is tests/plugin_demo/."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

import fedjax_clust as fc
from fedjax_clust.algorithms.registry import unregister_algorithm
from fedjax_clust.run.driver_options import Output

DEMO = pathlib.Path(__file__).parent / "plugin_demo"
NAME = "clipped-gradient-averaging"


@pytest.fixture
def plugin():
    sys.path.insert(0, str(DEMO))
    try:
        import fedjax_plugin_demo

        fc.register_algorithm(fedjax_plugin_demo.SPEC)
        yield fedjax_plugin_demo
    finally:
        unregister_algorithm(NAME)
        sys.path.remove(str(DEMO))


@pytest.fixture(scope="module")
def task():
    return fc.synthetic_regression(num_clusters=2, clients_per_cluster=4, seed=1)


def test_a_registered_algorithm_runs_like_a_built_in_one(plugin, task):
    assert NAME in fc.algorithm_names() and fc.algorithm_spec(NAME).owns_models
    with pytest.raises(ValueError, match="takes no option 'quantile'"):
        fc.make_algorithm(NAME, task, learning_rate=0.01, quantile=0.2)
    with pytest.raises(ValueError, match="already registered"):
        fc.register_algorithm(fc.AlgorithmSpec(NAME, plugin.SPEC.build))
    # mix = 0 is Local exactly: the spec's build reaches the user's builder with its own option
    local = fc.simulate(
        fc.make_algorithm("local", task, learning_rate=0.01, momentum=0.0),
        task,
        rounds=3,
        output=Output(progress=False),
    )
    mine = fc.simulate(
        fc.make_algorithm(NAME, task, learning_rate=0.01, mix=0.0), task, rounds=3, output=Output(progress=False)
    )
    np.testing.assert_array_equal(np.asarray(mine.state.params), np.asarray(local.state.params))
    # partial participation: non-participants keep their rows bit for bit
    algo = fc.make_algorithm(NAME, task, learning_rate=0.01, participation=3)
    state = algo.init(task.init_params(None), task.num_clients)
    new, metrics = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(0))
    out = ~np.asarray(metrics["participants"])
    assert out.sum() == task.num_clients - 3
    np.testing.assert_array_equal(np.asarray(new.params)[out], np.asarray(state.params)[out])
    assert not np.array_equal(np.asarray(new.params)[~out], np.asarray(state.params)[~out])
    # attackers: an identity attack changes nothing, a large one moves the honest clients
    attacked_task = fc.mark_byzantine(task, fraction=0.25, seed=0)
    clean = fc.make_algorithm(NAME, task, learning_rate=0.01, clip=1e9)
    same = fc.make_algorithm(
        NAME, attacked_task, learning_rate=0.01, clip=1e9, attack=fc.make_attack("large-gradient", scale=1.0)
    )
    large = fc.make_algorithm(NAME, attacked_task, learning_rate=0.01, clip=1e9, attack="large-gradient")
    key = jax.random.PRNGKey(3)
    a, _ = jax.jit(clean.round)(state, task.data, key)
    b, _ = jax.jit(same.round)(state, task.data, key)
    c, _ = jax.jit(large.round)(state, task.data, key)
    np.testing.assert_array_equal(np.asarray(a.params), np.asarray(b.params))
    honest = ~np.asarray(attacked_task.byzantine)
    assert not np.allclose(np.asarray(a.params)[honest], np.asarray(c.params)[honest])
    # a sweep over its learning rate equals the single runs
    swept = fc.sweep(NAME, task, grid={"learning_rate": [0.01, 0.02]}, rounds=3, output=Output(progress=False))
    for run, lr in zip(swept.runs, (0.01, 0.02)):
        single = fc.simulate(
            fc.make_algorithm(NAME, task, learning_rate=lr), task, rounds=3, output=Output(progress=False)
        )
        np.testing.assert_allclose(np.asarray(run.state.params), np.asarray(single.state.params), rtol=1e-6, atol=1e-6)


def _install(site: pathlib.Path) -> dict:
    """Install the demo plugin the way pip leaves a package: the module and a dist-info folder whose
    entry_points.txt names the spec, on the interpreter's path."""
    site.mkdir()
    shutil.copy(DEMO / "fedjax_plugin_demo.py", site)
    info = site / "fedjax_plugin_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fedjax-plugin-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[fedjax_clust.algorithms]\n{NAME} = fedjax_plugin_demo:SPEC\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_an_installed_plugin_runs_from_the_command_line(tmp_path):
    env = _install(tmp_path / "site")
    cli = [sys.executable, "-m", "fedjax_clust.cli"]
    run = subprocess.run(
        cli
        + [
            "run",
            "--algorithm",
            NAME,
            "--task",
            "synthetic",
            "--clients-per-cluster",
            "4",
            "--rounds",
            "4",
            "--eval-every",
            "2",
            "--participation",
            "0.5",
            "--attack",
            "sign-flip",
            "--byzantine-fraction",
            "0.25",
            "--batch-size",
            "4",
            "--clip",
            "5",
            "--mix",
            "0.25",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["algorithm"] == NAME and summary["hparams"]["participation"]["clients"] == 8
    # the plugin's own options are flags, read from its builder's signature (clip: float = 10.0, mix = 0.5)
    assert summary["hparams"]["clip"] == 5.0 and summary["hparams"]["mix"] == 0.25
    sweep = subprocess.run(
        cli
        + [
            "sweep",
            "--algorithm",
            NAME,
            "--task",
            "synthetic",
            "--clients-per-cluster",
            "4",
            "--rounds",
            "3",
            "--lr",
            "0.01,0.02",
            "--mix",
            "0,0.5",
            "--out",
            str(tmp_path / "sweep"),
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert sweep.returncode == 0, sweep.stderr
    assert len(json.loads((tmp_path / "sweep" / "sweep.json").read_text())["table"]) == 4
    helped = subprocess.run(cli + ["run", "--help"], env=env, capture_output=True, text=True)
    text = " ".join(helped.stdout.split())
    assert "--clip" in text and "the largest norm of a sent gradient" in text and "default 10.0" in text
    wrong = subprocess.run(
        cli + ["run", "--algorithm", NAME, "--mix", "half", "--out", str(tmp_path / "wrong")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert wrong.returncode == 2 and "--mix" in wrong.stderr and "expected a number" in wrong.stderr
    bad = subprocess.run(
        cli + ["run", "--algorithm", NAME, "--quantile", "0.2", "--out", str(tmp_path / "bad")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--quantile" in bad.stderr


# ----------------------------------------------------------------------------- robust aggregator and attack plugins
def _install_robust_plugin(monkeypatch):
    """Pretend the package of tests/plugin_demo/fedjax_robust_plugin_demo.py is installed: its module on the
    path, its specs named by entry points of fedjax_clust.aggregators and fedjax_clust.attacks (the registries
    load them again); returns the module."""
    import importlib.metadata

    from fedjax_clust.robust import registry

    monkeypatch.syspath_prepend(str(DEMO))
    groups = {
        "fedjax_clust.aggregators": ("midrange", "fedjax_robust_plugin_demo:AGGREGATOR"),
        "fedjax_clust.attacks": ("zero-message", "fedjax_robust_plugin_demo:ATTACK"),
    }
    real = importlib.metadata.entry_points

    def entry_points(**selection):
        group = selection.get("group")
        if group in groups:
            return [importlib.metadata.EntryPoint(*groups[group], group)]
        return real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registry.AGGREGATOR_REGISTRY, "entry_points_loaded", False)
    monkeypatch.setattr(registry.ATTACK_REGISTRY, "entry_points_loaded", False)
    import fedjax_robust_plugin_demo

    return fedjax_robust_plugin_demo


@pytest.fixture
def robust_plugin(monkeypatch):
    from fedjax_clust.robust import aggregator_names, attack_names, unregister_aggregator, unregister_attack

    yield _install_robust_plugin(monkeypatch)
    monkeypatch.undo()
    for names, unregister, name in (
        (aggregator_names, unregister_aggregator, "midrange"),
        (attack_names, unregister_attack, "zero-message"),
    ):
        if name in names():
            unregister(name)


def test_an_installed_aggregator_and_attack_run_from_the_command_line(robust_plugin, tmp_path):
    """``--aggregator midrange`` and ``--attack zero-message`` from a plugin's entry points: the command line
    accepts them, the run uses them (the rule is traced, the result differs from the mean's), and the run
    records them."""
    from fedjax_clust.cli.commands import build_parser, main

    small = ["--task", "synthetic", "--clients-per-cluster", "4", "--rounds", "2", "--eval-every", "2", "--no-progress"]
    robust_plugin.CALLS.clear()
    assert (
        main(["run", "--algorithm", "ground-truth", "--aggregator", "midrange", "--out", str(tmp_path / "mid")] + small)
        == 0
    )
    assert robust_plugin.CALLS, "the plugin's rule was never called"
    assert (
        main(["run", "--algorithm", "ground-truth", "--aggregator", "mean", "--out", str(tmp_path / "mean")] + small)
        == 0
    )
    mid = json.loads((tmp_path / "mid" / "summary.json").read_text())
    mean = json.loads((tmp_path / "mean" / "summary.json").read_text())
    assert mid["hparams"]["aggregator"] == "midrange" and "aggregator" not in mean["hparams"]  # the plain mean
    assert (
        abs(mid["mean_sq_dist_to_optimum"] - mean["mean_sq_dist_to_optimum"]) > 1e-3 * mean["mean_sq_dist_to_optimum"]
    )
    # the attack plugin, with the plugin aggregator
    calls = len(robust_plugin.CALLS)
    assert (
        main(
            [
                "run",
                "--algorithm",
                "ground-truth",
                "--aggregator",
                "midrange",
                "--attack",
                "zero-message",
                "--byzantine-fraction",
                "0.25",
                "--out",
                str(tmp_path / "attacked"),
            ]
            + small
        )
        == 0
    )
    attacked = json.loads((tmp_path / "attacked" / "summary.json").read_text())
    assert attacked["hparams"]["attack"] == "zero-message" and len(robust_plugin.CALLS) > calls
    # both are choices of the parser (its usage and its check), beside the built-in ones
    usage = build_parser().commands["run"].format_usage()
    assert "midrange" in usage and "zero-message" in usage and "centered-clipping" in usage


def test_a_plugin_rule_the_command_line_does_not_know_is_refused(tmp_path, capsys):
    from fedjax_clust.cli.commands import main

    assert main(["run", "--algorithm", "ground-truth", "--aggregator", "midrange", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--aggregator" in err and "midrange" in err


def test_a_broken_algorithm_plugin_raises_at_every_call_and_never_hides_the_others(monkeypatch):
    """The algorithm registry's entry points follow the aggregator registry's rule: a plugin that fails to load
    raises at every listing (it was marked loaded before loading: the first call raised, and every later one
    silently lacked the plugins after it); once it is fixed the others load."""
    import importlib.metadata

    from fedjax_clust.algorithms import registry

    monkeypatch.syspath_prepend(str(DEMO))
    group = registry.ENTRY_POINT_GROUP
    entries = [
        importlib.metadata.EntryPoint("broken", "fedjax_plugin_demo:NO_SUCH", group),
        importlib.metadata.EntryPoint(NAME, "fedjax_plugin_demo:SPEC", group),
    ]
    real = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda **sel: entries if sel.get("group") == group else real(**sel)
    )
    monkeypatch.setattr(registry._ALGORITHMS, "entry_points_loaded", False)
    try:
        for _ in range(2):
            with pytest.raises(ValueError, match="algorithm plugin 'broken'"):
                registry.algorithm_names()
        del entries[0]  # the broken package is fixed (uninstalled)
        assert NAME in registry.algorithm_names() and registry._ALGORITHMS.entry_points_loaded
    finally:
        if NAME in registry._ALGORITHMS.registered():
            unregister_algorithm(NAME)


@pytest.mark.slow  # the slow tier: a process run
def test_a_broken_installed_plugin_ends_the_command_line_with_one_error_line(tmp_path):
    """A task plugin whose module is missing: the parser lists every plugin's options when the commands load, and
    the command line answers with one ``error:`` line naming the plugin (exit status 2), not a traceback."""
    site = tmp_path / "site"
    info = site / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fedjax_clust.tasks]\nbroken-task = no_such_module_here:TASK\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in [env.get("PYTHONPATH")] if p])
    cli = [sys.executable, "-m", "fedjax_clust.cli", "run", "--algorithm", "global", "--out", str(tmp_path / "run")]
    run = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("error: the task plugin 'broken-task'") and run.stderr.count("\n") == 1
    assert "Traceback" not in run.stderr
