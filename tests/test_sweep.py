"""A sweep runs many configurations as one vmapped program and computes what simulate computes for each."""

import json
import math

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import primitive_counts

import fedjax_clust as fc
from fedjax_clust import NonFiniteError, make_algorithm, simulate, synthetic_regression
from fedjax_clust.cli.commands import main
from fedjax_clust.run.driver_options import Batching, Evaluation, Output
from fedjax_clust.run.experiment_records import PerRun, TaskGrid
from fedjax_clust.run.fused import fuse_rounds
from fedjax_clust.run.sweep import expand_grid, run_name, sweep, sweep_program


def task_of(seed):
    return synthetic_regression(num_clusters=2, clients_per_cluster=4, samples_per_client=9, dim=5, seed=seed)


def one_run(name, seed, values, options, rounds, eval_every, **kw):
    algo = make_algorithm(name, task_of(seed), **options, **values)
    try:
        return simulate(
            algo,
            task_of(seed),
            rounds=rounds,
            seed=seed,
            **kw,
            evaluation=Evaluation(eval_every=eval_every),
            output=Output(progress=False),
        )
    except NonFiniteError as e:
        return e.result


def assert_same_history(got, want, rtol):
    assert [r["round"] for r in got] == [r["round"] for r in want]
    for a, b in zip(got, want):
        assert set(a) == set(b)
        for key in a:
            if a[key] is None or b[key] is None:
                assert a[key] is b[key], key
            else:
                np.testing.assert_allclose(a[key], b[key], rtol=rtol, err_msg=key)


@pytest.mark.parametrize("batching", ["vmap", "map"])
@pytest.mark.parametrize(
    "name, options",
    [
        ("federated-clustering", dict(clustering_steps=4, momentum=0.9, batch_size=5, mesh=None)),
        ("local", dict(momentum=0.9)),
    ],
)
def test_each_run_equals_simulate(name, options, batching):
    grid = {"learning_rate": [0.02, 1e4]}  # 1e4 diverges: that run stops as simulate stops
    if name == "federated-clustering":
        grid["quantile"] = [0.3, 0.6]
    seeds = [1] if name == "federated-clustering" else [0, 1]
    result = sweep(
        name,
        task_of,
        grid=grid,
        seeds=seeds,
        rounds=12,
        options=options,
        evaluation=Evaluation(eval_every=5),
        output=Output(progress=False),
        batching=Batching(run_batching=batching),
    )
    assert len(result.runs) == len(expand_grid(grid, seeds))
    assert len(result.programs) == 1  # every value traced: one program
    for run in result.runs:
        want = one_run(name, run.summary["seed"], run.summary["sweep_values"], options, 12, 5)
        assert run.summary["status"] == want.summary["status"]
        # batched matmuls may round differently from unbatched ones: float32-level agreement
        assert_same_history(run.history, want.history, rtol=2e-5)
    stopped = [r for r in result.runs if r.summary["sweep_values"]["learning_rate"] == 1e4]
    assert stopped and all(r.summary["status"].startswith("stopped") for r in stopped)
    diverged = [row for row in result.table if row["learning_rate"] == 1e4]
    assert all(row["mean"] is None and row["completed"] == 0 for row in diverged)


# staged algorithms: the stages are conds keyed on the round, or on the data (empty aggregate groups, CFL's split)
STAGED = [
    (
        "srfca",
        dict(one_shot_rounds=2, refine_steps=2, refine_iterations=2),
        {"learning_rate": [0.05, 0.05], "threshold": [20.0, 30.0]},
    ),
    # beta = 0.25 trims 2 of the 8 clients' messages: the per-group aggregate (and its skip cond) stays; at the
    # default 0.1 it trims nothing and runs as one segment mean, without a cond
    ("three-stage", dict(num_clusters=2, erm_rounds=2, beta=0.25), {"learning_rate": [0.01, 0.02]}),
    ("fedsoft", dict(num_clusters=2, estimation_interval=2), {"learning_rate": [0.01, 0.02], "lam": [0.1, 0.5]}),
    ("cfl", dict(eps2=0.01, min_rounds=2), {"learning_rate": [0.02, 0.02], "eps1": [0.05, 3.0]}),
]


@pytest.mark.parametrize("name, options, grid", STAGED, ids=[case[0] for case in STAGED])
def test_sweep_keeps_every_cond(name, options, grid):
    """The runs share the round counter, so the vmapped program keeps every cond of one run's round (a batched
    round would make each a select running both branches every round)."""
    task = task_of(0)
    first = {k: v[0] for k, v in grid.items()}
    algo = make_algorithm(name, task, **options, **first)
    state = algo.init(task.init_params(jax.random.PRNGKey(0)), task.num_clients)
    single = primitive_counts(
        jax.make_jaxpr(fuse_rounds(algo.round, jit=False))(state, task.data, jax.random.PRNGKey(1), 1, 1).jaxpr
    )
    runs = len(grid["learning_rate"])
    program = sweep_program(name, task, options, {})
    hp = {k: jnp.asarray(v, jnp.float32) for k, v in grid.items()}
    params = jax.tree.map(lambda *xs: jnp.stack(xs), *[task.init_params(jax.random.PRNGKey(r)) for r in range(runs)])
    keys = jnp.stack([jax.random.PRNGKey(r) for r in range(runs)])
    states = program.init(hp, task.arrays(), {}, params, keys)
    assert states.round.shape == ()  # one round counter for all runs
    vmapped = primitive_counts(jax.make_jaxpr(program.rounds)(hp, task.arrays(), {}, states, keys, 1, 1).jaxpr)
    assert single["cond"] >= (1 if name in ("fedsoft", "cfl") else 3)
    assert vmapped["cond"] == single["cond"]
    # a data-dependent cond's batched form selects its outputs (here at most 2 leaves); a batched round made
    # every output of every branch a select (SR-FCA: 77 selects, against 43 in one run)
    assert vmapped["select_n"] <= single["select_n"] + 2 * single["cond"]


@pytest.mark.parametrize("name, options, grid", STAGED[::3], ids=[STAGED[0][0], STAGED[3][0]])
def test_staged_runs_equal_simulate(name, options, grid):
    """Runs whose stages (SR-FCA's ONE_SHOT / RECLUSTER / MERGE, its filled aggregate groups) and CFL's splits
    differ between the runs of one program compute what simulate computes."""
    values = [dict(zip(grid, combo)) for combo in zip(*grid.values())]
    result = sweep(
        name,
        task_of,
        grid={k: sorted(set(v)) for k, v in grid.items()},
        seeds=[0],
        rounds=10,
        options=options,
        evaluation=Evaluation(eval_every=5),
        output=Output(progress=False),
    )
    assert len(result.programs) == 1
    labels = []
    for run in result.runs:
        want = one_run(name, 0, run.summary["sweep_values"], options, 10, 5)
        assert run.summary["status"] == want.summary["status"] == "completed"
        assert_same_history(run.history, want.history, rtol=2e-5)
        assert int(run.state.round) == 10
        if run.summary["sweep_values"] in values:
            labels.append(np.asarray(run.state.rows["labels"]))
    assert not np.array_equal(*labels)  # the two runs took different branches


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_static_values_split_programs_and_chunks_do_not_change_numbers():
    grid = {"clustering_steps": [1, 3], "learning_rate": [0.01]}
    options = dict(quantile=0.5)
    together = sweep(
        "federated-clustering",
        task_of(0),
        grid=grid,
        seeds=[0, 1],
        rounds=6,
        options=options,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )
    assert [p["runs"] for p in together.programs] == [2, 2]  # one program per clustering_steps
    apart = sweep(
        "federated-clustering",
        task_of(0),
        grid=grid,
        seeds=[0, 1],
        rounds=6,
        options=options,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
        batching=Batching(runs_per_program=1),
    )
    assert len(apart.programs) == 4
    for a, b in zip(together.runs, apart.runs):
        assert a.summary["sweep_values"] == b.summary["sweep_values"]
        assert_same_history(a.history, b.history, rtol=2e-5)


def test_per_run_options_ifca_starts():
    """Options that depend on the run's seed and task (IFCA's cluster starts) are traced per run."""

    def starts(seed, task):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), 0)
        return {"init_cluster_params": task.initial_models("oracle", key)[np.array([0, 4])]}

    result = sweep(
        "ifca-1",
        task_of,
        grid={"learning_rate": [0.01]},
        seeds=[0, 1],
        rounds=6,
        options={"init_cluster_params": PerRun(lambda seed, task: starts(seed, task)["init_cluster_params"])},
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )
    for run in result.runs:
        seed = run.summary["seed"]
        want = one_run("ifca-1", seed, run.summary["sweep_values"], starts(seed, task_of(seed)), 6, 3)
        assert_same_history(run.history, want.history, rtol=2e-5)


def test_output_folder(tmp_path):
    out = tmp_path / "sweep"
    result = sweep(
        "global",
        task_of,
        grid={"learning_rate": [0.003, 0.01]},
        seeds=[0, 1],
        rounds=4,
        evaluation=Evaluation(eval_every=2),
        output=Output(out_dir=str(out), progress=False),
    )
    summary = json.loads((out / "sweep.json").read_text())
    assert [r["name"] for r in summary["runs"]] == [
        run_name({"learning_rate": lr}, s) for lr in (0.003, 0.01) for s in (0, 1)
    ]
    assert summary["metric"] == "mean_sq_dist_to_optimum" and len(summary["table"]) == 2
    row = summary["table"][1]
    finals = [r.history[-1]["mean_sq_dist_to_optimum"] for r in result.runs[2:]]
    assert math.isclose(row["mean"], float(np.mean(finals)), rel_tol=1e-6)
    for name in ("learning_rate=0.003,seed=0", "learning_rate=0.01,seed=1"):
        folder = out / "runs" / name
        assert json.loads((folder / "run.json").read_text())["status"] == "completed"
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rows] == [0, 2, 4]
        assert json.loads((folder / "summary.json").read_text())["seed"] == int(name[-1])
    assert (out / "sweep.png").stat().st_size > 5_000
    with pytest.raises(ValueError, match="overwrite"):
        sweep(
            "global", task_of, grid={"learning_rate": [0.01]}, rounds=2, output=Output(out_dir=str(out), progress=False)
        )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(grid={"learning_rate": []}), "at least one value"),
        (dict(grid={"learning_rate": [0.01]}, seeds=[1, 1]), "distinct"),
        (dict(grid={"learning_rate": [-1.0]}), "learning_rate"),
        (dict(grid={"learning_rate": [0.01]}, options={"learning_rate": 0.1}), "both"),
        (dict(grid={"learning_rate": [0.01]}, batching=Batching(runs_per_program=0)), "runs_per_program"),
    ],
)
def test_bad_sweeps(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sweep("local", task_of(0), rounds=2, **kwargs, output=Output(progress=False))


def test_cli_sweep(tmp_path, capsys):
    out = tmp_path / "cli"
    code = main(
        [
            "--cpu-devices",
            "1",
            "sweep",
            "--algorithm",
            "federated-clustering",
            "--task",
            "synthetic",
            "--clusters",
            "2",
            "--clients-per-cluster",
            "3",
            "--lr",
            "0.001,0.01",
            "--quantile",
            "0.3,0.6",
            "--seeds",
            "0,1",
            "--rounds",
            "4",
            "--eval-every",
            "2",
            "--out",
            str(out),
            "--no-progress",
            "--run-batching",
            "vmap",
        ]
    )
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "sweep.json").read_text())
    assert len(summary["runs"]) == 8 and summary["grid"] == {"learning_rate": [0.001, 0.01], "quantile": [0.3, 0.6]}
    assert [p["batching"] for p in summary["programs"]] == ["vmap"]
    assert "8 runs in 1 program(s)" in capsys.readouterr().out
    again = main(
        [
            "--cpu-devices",
            "1",
            "sweep",
            "--algorithm",
            "federated-clustering",
            "--task",
            "synthetic",
            "--clusters",
            "2",
            "--clients-per-cluster",
            "3",
            "--lr",
            "0.001,0.01",
            "--quantile",
            "0.3,0.6",
            "--seeds",
            "0,1",
            "--rounds",
            "4",
            "--eval-every",
            "2",
            "--out",
            str(out),
            "--no-progress",
            "--resume",
        ]
    )
    assert again == 0 and "8 runs in 1 program(s) (1 kept from disk)" in capsys.readouterr().out
    assert json.loads((out / "sweep.json").read_text())["table"] == summary["table"]
    bad = main(["sweep", "--algorithm", "local", "--lr", "0.01,fast", "--out", str(tmp_path / "bad")])
    assert bad == 2
    assert main(["sweep", "--algorithm", "local", "--quantile", "0.2", "--out", str(tmp_path / "bad2")]) == 2


def test_cli_sweeps_the_attackers_share(tmp_path, capsys):
    """``sweep --byzantine-fraction 0,0.25 --seeds 0,1``: beta = 0 is the attack-free run and beta = 0.25 the run
    of ``run --byzantine-fraction 0.25`` of each seed (whose attackers the seed draws; the masks are arguments of
    one program),
    every run in its own folder, the list repeated in config.toml and sweep.json's task_grid."""
    import tomllib

    common = [
        "--algorithm",
        "global",
        "--rounds",
        "12",
        "--eval-every",
        "6",
        "--clients-per-cluster",
        "4",
        "--no-progress",
    ]
    assert (
        main(
            [
                "sweep",
                *common,
                "--aggregator",
                "median",
                "--attack",
                "sign-flip",
                "--byzantine-fraction",
                "0,0.25",
                "--seeds",
                "0,1",
                "--out",
                str(tmp_path / "sweep"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    out = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert out["task_grid"] == {"byzantine_fraction": [0.0, 0.25]} and out["grid"] == {}
    final = {(r["values"]["byzantine_fraction"], r["seed"]): r["final"]["mean_sq_dist_to_optimum"] for r in out["runs"]}
    assert len(final) == 4 and len(out["programs"]) == 1  # the masks are arguments: every beta and seed, one program
    assert tomllib.loads((tmp_path / "sweep" / "config.toml").read_text())["byzantine-fraction"] == [0.0, 0.25]
    run_common = [a for a in common if a != "--no-progress"] + ["--no-progress", "--aggregator", "median"]
    assert main(["run", *run_common, "--out", str(tmp_path / "clean")]) == 0
    clean = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert final[(0.0, 0)] == pytest.approx(clean["mean_sq_dist_to_optimum"], rel=1e-5)
    for seed in (0, 1):
        assert (
            main(
                [
                    "run",
                    *run_common,
                    "--attack",
                    "sign-flip",
                    "--byzantine-fraction",
                    "0.25",
                    "--seed",
                    str(seed),
                    "--out",
                    str(tmp_path / f"attacked{seed}"),
                ]
            )
            == 0
        )
        attacked = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert final[(0.25, seed)] == pytest.approx(attacked["mean_sq_dist_to_optimum"], rel=1e-5), seed
        assert final[(0.25, seed)] != pytest.approx(final[(0.0, seed)], rel=1e-3)  # the attack changed something
    assert main(["sweep", *common, "--byzantine-fraction", "0,x", "--out", str(tmp_path / "bad")]) == 2
    assert (
        main(
            [
                "sweep",
                *common,
                "--attack",
                "sign-flip",
                "--byzantine-fraction",
                "0.25,0.25",
                "--out",
                str(tmp_path / "twice"),
            ]
        )
        == 2
    )  # a value twice would share a folder


def test_a_mapped_sweep_over_attacks_is_one_program_that_switches_over_their_kinds(tmp_path):
    """Runs that differ in their (message) attack share one program where the sweep maps its runs: each run's
    kind is an int32 argument (robust.attack_switch), every run computes what the program per kind computes
    (to float32 rounding: the switch's branch is fused apart), and its folder records its own attack. vmapped runs
    keep a
    program per kind unless asked (a vmapped switch computes every kind); label flipping and the ball attack
    never switch."""
    from fedjax_clust.robust import mark_byzantine
    from fedjax_clust.robust.attack_switch import AttackSwitch, switchable_attacks

    def task(seed, byzantine_fraction):
        clean = synthetic_regression(num_clusters=2, clients_per_cluster=4, dim=4, samples_per_client=8, seed=seed)
        return mark_byzantine(clean, fraction=byzantine_fraction, seed=seed)

    attacks = ["large-gradient", "sign-flip", "alie", "ipm"]

    def run(**kw):
        return sweep(
            "global",
            TaskGrid(task, {"byzantine_fraction": [0.25, 0.5]}),
            rounds=6,
            seeds=[0, 1],
            grid={"attack": attacks},
            options={"learning_rate": 0.01},
            **{"output": Output(progress=False), **kw},
            evaluation=Evaluation(eval_every=3),
        )

    switched = run(
        batching=Batching(run_batching="map"), output=Output(progress=False, out_dir=str(tmp_path / "switched"))
    )
    apart = run(batching=Batching(run_batching="map", attack_switch=False))
    assert len(switched.programs) == 1 and len(apart.programs) == len(attacks)
    for one, other in zip(switched.runs, apart.runs):  # float32 rounding apart (the branch fuses apart)
        for a, b in zip(one.history, other.history):
            assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-5) for k in a)
    finals = {r.summary["hparams"]["attack"]: r.history[-1]["mean_sq_dist_to_optimum"] for r in switched.runs[0:8:2]}
    assert len(set(finals.values())) == len(attacks)  # four kinds, four different runs
    saved = json.loads(
        (tmp_path / "switched" / "runs" / "byzantine_fraction=0.25,attack=ipm,seed=1" / "run.json").read_text()
    )
    assert saved["config"]["hyperparameters"]["static"]["attack"] == "ipm"
    assert len(run(batching=Batching(run_batching="vmap")).programs) == len(attacks)
    assert len(run(batching=Batching(run_batching="vmap", attack_switch=True)).programs) == 1
    assert switchable_attacks(["sign-flip", "label-flip", "ball-edge", "alie"], "map") == ("sign-flip", "alie")
    assert switchable_attacks(["sign-flip", "ball-edge"], "map") == () and switchable_attacks(attacks, "vmap") == ()
    with pytest.raises(ValueError, match="attack_switch"):
        run(batching=Batching(attack_switch="yes"))
    with pytest.raises(ValueError, match="message attacks"):
        AttackSwitch((fc_make_attack("sign-flip"), fc_make_attack("label-flip")), 0)


def fc_make_attack(name):
    from fedjax_clust.robust import make_attack

    return make_attack(name)


def test_several_attacks_at_an_attack_free_point_warn_that_their_runs_are_identical(tmp_path):
    """An attack x beta grid's beta = 0 point marks no attacker, so its attacks' runs are one run under several
    labels: the sweep says so (IdenticalRunsWarning, once per sweep, naming the point), computes the run once
    (identical_runs), and every label keeps its row and folder, naming the run it is (same_as) in its summary and
    sweep.json; that run equals the one the label's own run would compute; the attacked point differs by attack.
    One attack, or no attack-free point: no warning."""
    import dataclasses
    import warnings

    from fedjax_clust.robust import mark_byzantine
    from fedjax_clust.run.sweep import IdenticalRunsWarning

    def task(seed, byzantine_fraction):
        clean = synthetic_regression(num_clusters=2, clients_per_cluster=3, dim=4, samples_per_client=8, seed=seed)
        if byzantine_fraction == 0:  # the CLI's attack-free baseline: a mask that marks nobody
            return dataclasses.replace(clean, byzantine=np.zeros(clean.num_clients, bool))
        return mark_byzantine(clean, fraction=byzantine_fraction, seed=seed)

    def run(attacks, fractions, out_dir=None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = sweep(
                "global",
                TaskGrid(task, {"byzantine_fraction": fractions}),
                rounds=2,
                seeds=[0],
                grid={"attack": attacks},
                options={"learning_rate": 0.01},
                evaluation=Evaluation(eval_every=2),
                output=Output(progress=False, out_dir=out_dir),
            )
        return result, [w for w in caught if issubclass(w.category, IdenticalRunsWarning)]

    out = tmp_path / "attacks"
    result, caught = run(["alie", "nan"], [0.0, 0.34], str(out))
    assert len(caught) == 1 and "byzantine_fraction=0.0" in str(caught[0].message), [str(w.message) for w in caught]
    assert "computed once" in str(caught[0].message)
    final = {(row["byzantine_fraction"], row["attack"]): row["mean"] for row in result.table}
    assert final[(0.0, "alie")] == final[(0.0, "nan")]
    assert final[(0.34, "alie")] != final[(0.34, "nan")]
    assert sum(p["runs"] for p in result.programs) == 3  # 4 grid points, one of them the same run as another
    saved = json.loads((out / "sweep.json").read_text())
    twins = {r["name"]: r.get("same_as") for r in saved["runs"]}
    assert twins == {
        "byzantine_fraction=0,attack=alie,seed=0": None,
        "byzantine_fraction=0,attack=nan,seed=0": "byzantine_fraction=0,attack=alie,seed=0",
        "byzantine_fraction=0.34,attack=alie,seed=0": None,
        "byzantine_fraction=0.34,attack=nan,seed=0": None,
    }
    folder = out / "runs" / "byzantine_fraction=0,attack=nan,seed=0"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["same_as"] == "byzantine_fraction=0,attack=alie,seed=0" and summary["hparams"]["attack"] == "nan"
    assert json.loads((folder / "run.json").read_text())["config"]["hparams"]["attack"] == "nan"
    alone = simulate(
        make_algorithm("global", task(0, 0.0), learning_rate=0.01, attack="nan"),
        task(0, 0.0),
        rounds=2,
        seed=0,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    assert alone.history[-1]["mean_sq_dist_to_optimum"] == pytest.approx(final[(0.0, "nan")], rel=1e-6)
    # a value the algorithm's record does not hold (the matmul precision) keeps two runs apart
    precisions = sweep(
        "global",
        task(0, 0.34),
        rounds=2,
        seeds=[0],
        grid={"matmul_precision": ["highest", "default"]},
        options={"learning_rate": 0.01, "attack": "alie"},
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    assert [r.summary.get("same_as") for r in precisions.runs] == [None, None]
    assert run(["alie"], [0.0, 0.34])[1] == [] and run(["alie", "nan"], [0.34])[1] == []


def test_ctrl_c_during_a_sweep_is_one_line_naming_the_program(tmp_path):
    """SIGINT while a sweep's program runs: exit 130 and one line saying which program was running and that
    nothing was written, no traceback (the one interrupt path of every command)."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "sweep"
    err_path = tmp_path / "sweep.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fedjax_clust.cli",
                "--cpu-devices",
                "1",
                "sweep",
                "--algorithm",
                "local",
                "--lr",
                "0.01,0.02",
                "--rounds",
                "100000000",
                "--clients-per-cluster",
                "3",
                "--out",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler),
        )
        try:
            deadline = time.time() + 180
            while "round" not in err_path.read_text():  # the progress line: the program is running
                assert proc.poll() is None and time.time() < deadline, err_path.read_text()
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    last = err_path.read_text().strip().splitlines()[-1]
    assert code == 130 and "Traceback" not in err_path.read_text()
    assert last.startswith("interrupted: sweep interrupted in program 1 of 1 (0 of 2 runs had finished)"), last
    assert f"nothing was written to {out}" in last and not (out / "sweep.json").exists()


@pytest.mark.parametrize("batching", ["vmap", "map"])
def test_a_killed_sweep_resumes_keeping_every_finished_program(tmp_path, monkeypatch, batching):
    """Ctrl-C in the third of four programs: the two finished programs' runs are on disk; ``resume=True`` keeps
    them (their files are not rewritten), runs the other two, and gives the table of an uninterrupted sweep."""
    import os

    import fedjax_clust.run.sweep as sweep_module

    kwargs = dict(
        grid={"learning_rate": [0.003, 0.01]},
        seeds=[0, 1],
        rounds=4,
        evaluation=Evaluation(eval_every=2),
        batching=Batching(runs_per_program=1, run_batching=batching),
    )
    whole = sweep("global", task_of, **kwargs, output=Output(progress=False, out_dir=str(tmp_path / "whole")))
    real, calls = sweep_module.run_program, []

    def killed_in_the_third(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)

    out = tmp_path / "killed"
    monkeypatch.setattr(sweep_module, "run_program", killed_in_the_third)
    with pytest.raises(KeyboardInterrupt, match="program 3 of 4 \\(2 of 4 runs had finished\\); their folders"):
        sweep("global", task_of, **kwargs, output=Output(progress=False, out_dir=str(out)))
    monkeypatch.setattr(sweep_module, "run_program", real)
    finished = sorted(p.name for p in (out / "runs").iterdir() if (p / "run.json").exists())
    assert finished == ["learning_rate=0.003,seed=0", "learning_rate=0.003,seed=1"]
    assert not (out / "sweep.json").exists()
    written = {name: os.stat(out / "runs" / name / "metrics.jsonl").st_mtime_ns for name in finished}
    with pytest.raises(ValueError, match="already holds"):
        sweep("global", task_of, **kwargs, output=Output(progress=False, out_dir=str(out)))
    with pytest.raises(ValueError, match="written by a different run.*rounds"):
        sweep(
            "global", task_of, **{**kwargs, "rounds": 6}, output=Output(progress=False, out_dir=str(out), resume=True)
        )
    resumed = sweep("global", task_of, **kwargs, output=Output(progress=False, out_dir=str(out), resume=True))
    assert [p.get("kept", False) for p in resumed.programs] == [True, True, False, False]
    assert [p["batching"] for p in resumed.programs] == [None, None, batching, batching]
    assert {n: os.stat(out / "runs" / n / "metrics.jsonl").st_mtime_ns for n in finished} == written
    assert resumed.runs[0].state is None and resumed.runs[3].state is not None
    assert (
        json.loads((out / "sweep.json").read_text())["table"]
        == json.loads((tmp_path / "whole" / "sweep.json").read_text())["table"]
    )
    for a, b in zip(resumed.runs, whole.runs):
        assert a.summary["sweep_values"] == b.summary["sweep_values"]
        assert_same_history(a.history, b.history, rtol=0)
    with pytest.raises(ValueError, match="resume and overwrite"):
        sweep("global", task_of, **kwargs, output=Output(progress=False, out_dir=str(out), resume=True, overwrite=True))


def test_a_sweep_starts_ifca_from_each_seeds_own_models():
    """Without fixed starts, each seed of a sweep draws IFCA's K models from its run key, as simulate does."""
    result = sweep(
        "ifca-1",
        task_of,
        grid={"learning_rate": [0.01]},
        seeds=[0, 1],
        rounds=4,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    for run in result.runs:
        seed = run.summary["seed"]
        want = one_run("ifca-1", seed, run.summary["sweep_values"], {}, 4, 2)
        assert_same_history(run.history, want.history, rtol=2e-5)
    first, second = (np.asarray(jax.tree.leaves(run.state.extra["centers"])[0]) for run in result.runs)
    assert not np.allclose(first, second)


def test_a_pooled_population_is_built_once_when_shared_and_per_program_when_seeded(monkeypatch):
    """A sweep over seeds of one pooled task builds its images once (not once per seed); a task per seed is
    built for the program that runs it, and every run equals simulate's."""
    from fedjax_clust import make_task
    from fedjax_clust.data.pooled import PooledImages

    def pooled(seed):
        return make_task("mnist-population", num_clients=12, model="mlp", hidden=8, max_client_examples=8, seed=seed)

    builds = []
    real_take = PooledImages.take
    monkeypatch.setattr(
        PooledImages, "take", lambda self, *a, **k: builds.append(len(self)) or real_take(self, *a, **k)
    )
    options = dict(batch_size=4, participation=6)
    shared = pooled(0)
    builds.clear()
    one = sweep(
        "global",
        shared,
        grid={"learning_rate": [0.05, 0.1]},
        seeds=[0, 1],
        rounds=2,
        options=options,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    assert len(builds) == 2  # the training and the test images, once for the four runs
    builds.clear()
    import fedjax_clust.run.sweep as sweep_module

    real, at_start = sweep_module.run_program, []

    def counted(*args, **kw):
        at_start.append(len(builds))  # the builds before this program starts
        return real(*args, **kw)

    monkeypatch.setattr(sweep_module, "run_program", counted)
    seeded = sweep(
        "global",
        pooled,
        grid={"learning_rate": [0.05]},
        seeds=[0, 1],
        rounds=2,
        options=options,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
        batching=Batching(runs_per_program=1),
    )
    assert at_start == [0, 2] and len(builds) == 4  # each seed's two parts, when its own program runs
    for run, task in [(r, shared) for r in one.runs] + [(r, pooled(r.summary["seed"])) for r in seeded.runs]:
        seed, values = run.summary["seed"], run.summary["sweep_values"]
        want = simulate(
            make_algorithm("global", task, **options, **values),
            task,
            rounds=2,
            seed=seed,
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False),
        )
        assert_same_history(run.history, want.history, rtol=2e-5)


def test_map_runs_computes_what_vmap_computes_one_run_after_another():
    from fedjax_clust.run.sweep import map_runs

    def f(a, shared, pair):
        return {"sum": a * shared + pair[0], "same": shared * 2.0}, pair[1] + a

    args = (jnp.arange(3.0), jnp.float32(1.5), (jnp.ones((3, 2)), jnp.float32(4.0)))
    in_axes, out_axes = (0, None, (0, None)), ({"sum": 0, "same": None}, 0)
    want = jax.vmap(f, in_axes=in_axes, out_axes=out_axes)(*args)
    got = jax.jit(map_runs(f, in_axes, out_axes))(*args)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    text = jax.jit(map_runs(f, in_axes, out_axes)).lower(*args).as_text()
    assert "while" in text  # a loop over the runs, not a batched computation


@pytest.mark.parametrize(
    "name, options",
    [
        ("global", dict(momentum=0.9)),
        ("ifca-1", dict(num_clusters=2)),
        ("federated-clustering", dict(clustering_steps=2, batch_size=5, mesh=None)),
    ],
)
def test_mapped_runs_equal_simulate_bit_for_bit_and_vmapped_ones_to_rounding(name, options):
    from fedjax_clust.run.sweep import resolved_run_batching

    assert resolved_run_batching("auto") == ("map" if jax.default_backend() == "cpu" else "vmap")
    grid, seeds = {"learning_rate": [0.02, 0.03]}, [0, 1]
    mapped = sweep(
        name,
        task_of,
        grid=grid,
        seeds=seeds,
        rounds=6,
        options=options,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
        batching=Batching(run_batching="map"),
    )
    batched = sweep(
        name,
        task_of,
        grid=grid,
        seeds=seeds,
        rounds=6,
        options=options,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
        batching=Batching(run_batching="vmap"),
    )
    assert [p["batching"] for p in mapped.programs] == ["map"] and batched.programs[0]["batching"] == "vmap"
    assert mapped.runs[0].summary["run_batching"] == "map"
    for m, v in zip(mapped.runs, batched.runs):
        seed, values = m.summary["seed"], m.summary["sweep_values"]
        want = one_run(name, seed, values, options, 6, 3)
        assert m.history == want.history  # the single run's kernels: the same numbers
        for a, b in zip(jax.tree.leaves(m.state), jax.tree.leaves(want.state)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert_same_history(v.history, want.history, rtol=2e-5)
    with pytest.raises(ValueError, match="run_batching"):
        sweep(
            name,
            task_of,
            grid=grid,
            seeds=[0],
            rounds=1,
            options=options,
            output=Output(progress=False),
            batching=Batching(run_batching="pmap"),
        )
    from fedjax_clust.run.sweep import map_runs

    with pytest.raises(ValueError, match="axis 0 or shares"):
        map_runs(lambda x: x, (1,), 0)(jnp.ones((2, 3)))


def test_attacks_and_aggregators_with_other_options_are_other_runs():
    """A run records a rule's options where they differ from its defaults (robust.registry.recorded_name), so a
    sweep over one attack at two strengths, or one aggregator at two trims, computes each run (they were once
    recorded by name alone and aliased as identical): each equals simulate of its own algorithm."""
    from fedjax_clust.robust import make_aggregator, make_attack, mark_byzantine
    from fedjax_clust.robust.registry import recorded_name

    assert recorded_name(make_attack("ipm")) == "ipm" == recorded_name(make_attack("ipm", epsilon=0.1))
    assert recorded_name(make_attack("ipm", epsilon=np.float64(5.0))) == "ipm(epsilon=5.0)"
    assert recorded_name(make_aggregator("trimmed-mean", beta=0.2)) == "trimmed-mean(beta=0.2)"
    task = mark_byzantine(
        synthetic_regression(num_clusters=2, clients_per_cluster=5, dim=4, samples_per_client=8, seed=0),
        fraction=0.2,
        seed=0,
    )
    attacks = [make_attack("ipm", epsilon=0.1), make_attack("ipm", epsilon=5.0)]
    aggregators = [make_aggregator("trimmed-mean", beta=0.1), make_aggregator("trimmed-mean", beta=0.3)]
    result = sweep(
        "global",
        task,
        rounds=3,
        seeds=[0],
        grid={"attack": attacks, "aggregator": aggregators},
        options={"learning_rate": 0.01},
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )
    assert sum(p["runs"] for p in result.programs) == 4
    finals = [run.history[-1][result.metric] for run in result.runs]
    assert len(set(finals)) == 4, finals
    pairs = [(a, g) for a in attacks for g in aggregators]
    for run, (attack, aggregator) in [(result.runs[i], pairs[i]) for i in (0, 3)]:
        alone = simulate(
            make_algorithm("global", task, learning_rate=0.01, attack=attack, aggregator=aggregator),
            task,
            rounds=3,
            evaluation=Evaluation(eval_every=3),
            output=Output(progress=False),
        )
        assert run.history[-1][result.metric] == pytest.approx(alone.history[-1][result.metric], rel=1e-6)
        assert run.summary["hparams"]["attack"] == recorded_name(attack)


def test_an_attacks_numbers_are_arguments_runs_of_one_kind_share_a_program():
    """Attacks that differ only in their numbers (a large-gradient's scale, IPM's epsilon, ALIE's z) are one
    program per kind, the numbers its float32 arguments (Attack.with_numbers); ALIE without z computes z from the
    counts (other code) and is a kind of its own. The runs equal simulate of their own attack to float32 rounding,
    mapped or vmapped."""
    from fedjax_clust.robust import make_attack, mark_byzantine
    from fedjax_clust.robust.registry import recorded_name

    task = mark_byzantine(
        synthetic_regression(num_clusters=2, clients_per_cluster=5, dim=4, samples_per_client=8, seed=0),
        fraction=0.2,
        seed=0,
    )
    attacks = [
        make_attack("large-gradient", scale=2.0),
        make_attack("large-gradient", scale=5),
        make_attack("ipm", epsilon=0.1),
        make_attack("ipm", epsilon=2.0),
        make_attack("alie"),
        make_attack("alie", z=0.5),
        make_attack("alie", z=1.5),
    ]
    assert attacks[1].numbers() == {"scale": 5} and attacks[4].numbers() == {}
    assert attacks[0].kind() == attacks[1].kind() != attacks[2].kind()
    finals = {}
    for batching in ("map", "vmap"):
        result = sweep(
            "global",
            task,
            rounds=3,
            seeds=[0],
            grid={"attack": attacks},
            options={"learning_rate": 0.01, "momentum": 0.5},
            evaluation=Evaluation(eval_every=3),
            output=Output(progress=False),
            batching=Batching(run_batching=batching, attack_switch=False),
        )
        assert len(result.programs) == 4 and sum(p["runs"] for p in result.programs) == len(attacks)
        assert [run.summary["hparams"]["attack"] for run in result.runs] == [recorded_name(a) for a in attacks]
        finals[batching] = [run.history[-1][result.metric] for run in result.runs]
    assert finals["vmap"] == pytest.approx(finals["map"], rel=1e-5)
    assert len(set(finals["map"])) == len(attacks)
    for i in (1, 3, 6):  # a number of each traced kind against its own compiled constant
        alone = simulate(
            make_algorithm("global", task, learning_rate=0.01, momentum=0.5, attack=attacks[i]),
            task,
            rounds=3,
            evaluation=Evaluation(eval_every=3),
            output=Output(progress=False),
        )
        assert finals["map"][i] == pytest.approx(alone.history[-1][result.metric], rel=1e-5), attacks[i]
    with pytest.raises(ValueError, match="none of its numbers"):
        attacks[0].with_numbers({"epsilon": 1.0})


def test_attacks_written_with_their_options_are_the_same_runs_and_one_program(tmp_path):
    """The command line's "ipm(epsilon=5.0)" (a name with its options, as runs record it) is make_attack("ipm",
    epsilon=5.0): a sweep over such names is one program per kind, its runs those of the attack objects, its
    records and folders the names as written; a comma inside the parentheses stays in its item."""
    from fedjax_clust.cli.arguments import split_list
    from fedjax_clust.cli.commands import main
    from fedjax_clust.robust import make_attack, mark_byzantine

    assert split_list("ipm(epsilon=0.1),krum(fraction=0.2, multi=True),mean") == [
        "ipm(epsilon=0.1)",
        "krum(fraction=0.2, multi=True)",
        "mean",
    ]
    task = mark_byzantine(
        synthetic_regression(num_clusters=2, clients_per_cluster=5, dim=4, samples_per_client=8, seed=0),
        fraction=0.2,
        seed=0,
    )
    run = dict(
        rounds=3,
        evaluation=Evaluation(eval_every=3),
        seeds=[0],
        options={"learning_rate": 0.01},
        output=Output(progress=False),
    )
    written = sweep("global", task, grid={"attack": ["ipm(epsilon=0.5)", "ipm(epsilon=5.0)"]}, **run)
    objects = sweep(
        "global", task, grid={"attack": [make_attack("ipm", epsilon=0.5), make_attack("ipm", epsilon=5.0)]}, **run
    )
    assert len(written.programs) == 1
    assert [r.summary["hparams"]["attack"] for r in written.runs] == ["ipm(epsilon=0.5)", "ipm(epsilon=5.0)"]
    assert [r.history for r in written.runs] == [r.history for r in objects.runs]
    out = tmp_path / "cli"
    assert (
        main(
            [
                "sweep",
                "--algorithm",
                "global",
                "--attack",
                "ipm(epsilon=0.5),ipm(epsilon=5.0)",
                "--byzantine-fraction",
                "0.2",
                "--clusters",
                "2",
                "--clients-per-cluster",
                "5",
                "--rounds",
                "3",
                "--eval-every",
                "3",
                "--seeds",
                "0",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "attack=ipm(epsilon=0.5),seed=0",
        "attack=ipm(epsilon=5.0),seed=0",
    ]


def test_seeds_whose_tasks_differ_in_shape_run_as_separate_programs():
    """A task whose arrays' shapes depend on the seed (a Dirichlet partition's largest client) cannot stack its
    runs into one program: each shape is its own program, and every run still equals simulate."""

    def task_of_seed(seed):
        return fc.make_task("synthetic", num_clusters=2, clients_per_cluster=3, samples_per_client=4 + seed, seed=seed)

    result = sweep(
        "local",
        task_of_seed,
        grid={"learning_rate": [0.01, 0.02]},
        seeds=[0, 1],
        rounds=3,
        options=dict(momentum=0.0),
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )
    assert len(result.programs) == 2 and len(result.runs) == 4
    for run in result.runs:
        seed, values = run.summary["seed"], run.summary["sweep_values"]
        task = task_of_seed(seed)
        want = fc.simulate(
            fc.make_algorithm("local", task, momentum=0.0, **values),
            task,
            rounds=3,
            seed=seed,
            evaluation=Evaluation(eval_every=3),
            output=Output(progress=False),
        )
        assert_same_history(run.history, want.history, rtol=2e-5)
