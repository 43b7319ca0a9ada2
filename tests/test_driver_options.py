"""The drivers' records (issue 67): simulate, run_comparison, sweep and study take Evaluation / Output /
Checkpointing / Batching records, a sweep's or a study's task a TaskGrid, an algorithm a Candidate, an option a
PerRun; the former flat keywords make the same run for one version, with a DeprecationWarning at the caller."""

import json
import warnings

import numpy as np
import pytest

import fedjax_clust as fc
import fedjax_clust.run.compare as compare_module
from fedjax_clust.incentives.defection_free import SchemeSettings, run_scheme
from fedjax_clust.run.advice import RunAdvice
from fedjax_clust.run.statistics import FewSeedsWarning


def _task(seed=0, samples_per_client=8):
    return fc.synthetic_regression(
        num_clusters=2, clients_per_cluster=2, dim=3, samples_per_client=samples_per_client, seed=seed
    )


QUIET = fc.Output(progress=False)


def _deprecated(caught) -> list:
    """The messages of the DeprecationWarnings in ``caught``, each checked to point at this file."""
    found = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert found and all(w.filename == __file__ for w in found)
    return [str(w.message) for w in found]


def test_simulate_with_records_is_the_run_of_the_flat_keywords(tmp_path):
    task = _task()
    algo = fc.make_algorithm("local", task, learning_rate=0.05)
    new = fc.simulate(
        algo,
        task,
        rounds=4,
        evaluation=fc.Evaluation(eval_every=2, eval_clients=3),
        output=fc.Output(out_dir=str(tmp_path / "new"), progress=False),
        checkpointing=fc.Checkpointing(checkpoint_every=2),
        placement=fc.Placement(max_fused_rounds=1),
    )
    with pytest.warns(DeprecationWarning) as caught:
        old = fc.simulate(
            algo,
            task,
            rounds=4,
            eval_every=2,
            eval_clients=3,
            out_dir=str(tmp_path / "old"),
            progress=False,
            checkpoint_every=2,
            max_fused_rounds=1,
        )
    messages = _deprecated(caught)
    assert any("eval_every= keyword is deprecated" in m and "Evaluation(eval_every=...)" in m for m in messages)
    assert any("max_fused_rounds= keyword is deprecated" in m for m in messages)
    assert new.history == old.history
    configs = [json.loads((tmp_path / d / "run.json").read_text())["config"] for d in ("new", "old")]
    assert configs[0] == configs[1] and configs[0]["eval_every"] == 2 and configs[0]["eval_clients"] == 3
    assert (tmp_path / "new" / "checkpoints").is_dir() and (tmp_path / "old" / "checkpoints").is_dir()
    with pytest.raises(ValueError, match="not both"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fc.simulate(algo, task, rounds=2, evaluation=fc.Evaluation(eval_every=2), eval_every=1, output=QUIET)
    with pytest.raises(TypeError, match="unexpected keyword argument 'eval_evry'"):
        fc.simulate(algo, task, rounds=2, eval_evry=1, output=QUIET)
    with pytest.raises(ValueError, match="max_fused_rounds"):
        fc.Placement(max_fused_rounds=0)
    with pytest.warns(DeprecationWarning, match="max_fused_rounds= keyword") as caught:  # beside a placement, as in 0.2
        beside = fc.simulate(
            algo, task, rounds=4, placement=fc.Placement(client_rows="device"), max_fused_rounds=1, output=QUIET
        )
    _deprecated(caught)
    assert beside.history == fc.simulate(algo, task, rounds=4, output=QUIET).history
    with pytest.raises(ValueError, match="not both"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fc.simulate(algo, task, rounds=4, placement=fc.Placement(max_fused_rounds=2), max_fused_rounds=1)


def test_the_evaluations_metric_is_the_one_the_ended_worse_advice_reads():
    """Local's distance to the optimum falls: nothing to say; read as a metric where larger is better, the same
    run ended worse than it started, and the advice says so."""
    task = _task()
    algo = fc.make_algorithm("local", task, learning_rate=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunAdvice)
        fc.simulate(algo, task, rounds=6, evaluation=fc.Evaluation(eval_every=3), output=QUIET)
    inverted = fc.Evaluation(eval_every=3, metric="mean_sq_dist_to_optimum", higher_better=True)
    with pytest.warns(RunAdvice, match="mean_sq_dist_to_optimum ended at"):
        fc.simulate(algo, task, rounds=6, evaluation=inverted, output=QUIET)
    with pytest.warns(RunAdvice, match="mean_sq_dist_to_optimum ended at"):  # the default headline, inverted
        fc.simulate(algo, task, rounds=6, evaluation=fc.Evaluation(eval_every=3, higher_better=True), output=QUIET)


def test_run_comparison_takes_candidates_and_shared_options_and_its_former_keywords(tmp_path, monkeypatch):
    task = _task()
    drawn = []
    monkeypatch.setattr(
        compare_module, "plot_convergence", lambda results, metric, path, title="": drawn.append(metric)
    )
    candidates = [
        fc.Candidate("federated-clustering", options={"quantile": 0.5}),
        fc.Candidate("local", options={"learning_rate": 0.1}),
        "global",
    ]
    new = fc.run_comparison(
        task,
        candidates,
        rounds=3,
        options={"learning_rate": 0.05, "momentum": 0.5},
        evaluation=fc.Evaluation(eval_every=3, metric="mean_loss"),
        output=fc.Output(out_dir=str(tmp_path / "new"), progress=False),
    )
    assert drawn == ["mean_loss"]  # the evaluation's metric is the figure's
    hparams = {name: r.summary["hparams"] for name, r in new.items()}
    assert hparams["federated-clustering"]["quantile"] == 0.5 and hparams["local"]["learning_rate"] == 0.1
    assert hparams["global"]["learning_rate"] == 0.05 and hparams["global"]["momentum"] == 0.5
    with pytest.warns(DeprecationWarning) as caught:
        old = fc.run_comparison(
            task,
            ["federated-clustering", "local", "global"],
            rounds=3,
            learning_rate=0.05,
            momentum=0.5,
            learning_rates={"local": 0.1},
            quantile=0.5,
            eval_every=3,
            progress=False,
        )
    assert any("learning_rates= (now Candidate(algorithm" in m for m in _deprecated(caught))
    assert {name: r.history for name, r in new.items()} == {name: r.history for name, r in old.items()}
    with pytest.warns(DeprecationWarning, match="now Candidate"):
        per_algorithm = fc.run_comparison(
            task, ["local"], rounds=3, options={"local": {"learning_rate": 0.1}}, output=QUIET
        )
    assert per_algorithm["local"].summary["hparams"]["learning_rate"] == 0.1
    with pytest.warns(DeprecationWarning):  # 0.2's precedence: options[name] over learning_rates, loose keywords
        spied = fc.run_comparison(  # over options["federated-clustering"]; entries of absent algorithms ignored
            task,
            ["federated-clustering", "local"],
            rounds=1,
            learning_rate=0.05,
            learning_rates={"local": 0.2, "global": 0.3},
            options={"local": {"learning_rate": 0.1}, "federated-clustering": {"radius": 1.0}, "global": {}},
            radius=2.0,
            output=QUIET,
        )
    assert spied["local"].summary["hparams"]["learning_rate"] == 0.1
    assert spied["federated-clustering"].summary["hparams"]["radius"] == 2.0
    with pytest.raises(ValueError, match="not both"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fc.run_comparison(task, ["local"], rounds=1, options={"learning_rate": 0.05}, learning_rate=0.5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'eval_evry'"):
        fc.run_comparison(task, ["local"], rounds=1, options={"learning_rate": 0.05}, eval_evry=2)
    with pytest.raises(ValueError, match="does not resume"):
        fc.run_comparison(task, ["local"], rounds=1, options={"learning_rate": 0.1}, output=fc.Output(resume=True))
    with pytest.raises(ValueError, match="distinct"):
        fc.run_comparison(task, ["local", fc.Candidate("local")], rounds=1, options={"learning_rate": 0.1})
    with pytest.raises(ValueError, match="takes the options option 'radius'"):
        fc.run_comparison(task, ["local"], rounds=1, options={"learning_rate": 0.1, "radius": 1.0})


def _task_of(seed, samples_per_client=8):
    return _task(seed, samples_per_client)


def _starts(seed, task):
    """IFCA's two cluster models from the run's seed: the oracle starts of clients 0 and 2."""
    import jax

    return task.initial_models("oracle", jax.random.fold_in(jax.random.PRNGKey(seed), 0))[np.array([0, 2])]


def test_sweep_takes_a_task_grid_per_run_options_and_records_and_its_former_keywords():
    new = fc.sweep(
        "ifca-1",
        fc.TaskGrid(_task_of, {"samples_per_client": [6, 8]}),
        grid={"learning_rate": [0.01]},
        seeds=[0, 1],
        rounds=4,
        options={"init_cluster_params": fc.PerRun(_starts)},
        evaluation=fc.Evaluation(eval_every=2, metric="mean_loss"),
        output=QUIET,
        batching=fc.Batching(runs_per_program=2),
    )
    assert new.metric == "mean_loss" and len(new.runs) == 4 and len(new.programs) == 2
    with pytest.warns(DeprecationWarning) as caught:
        old = fc.sweep(
            "ifca-1",
            _task_of,
            task_grid={"samples_per_client": [6, 8]},
            grid={"learning_rate": [0.01]},
            seeds=[0, 1],
            rounds=4,
            run_options=lambda seed, task: {"init_cluster_params": _starts(seed, task)},
            eval_every=2,
            metric="mean_loss",
            progress=False,
            runs_per_program=2,
        )
    messages = _deprecated(caught)
    assert any("task_grid= keyword is deprecated" in m for m in messages)
    assert any("run_options= keyword is deprecated" in m for m in messages)
    assert any("eval_every= keyword is deprecated" in m and "Evaluation" in m for m in messages)
    assert [r.history for r in new.runs] == [r.history for r in old.runs]
    assert [r.summary["sweep_values"] for r in new.runs] == [r.summary["sweep_values"] for r in old.runs]
    with pytest.raises(ValueError, match="not both"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fc.sweep(
            "local",
            fc.TaskGrid(_task_of, {"samples_per_client": [6]}),
            task_grid={"samples_per_client": [8]},
            grid={"learning_rate": [0.01]},
            rounds=1,
        )
    with pytest.raises(ValueError, match="both in grid and in options"):
        fc.sweep(
            "ifca-1",
            _task_of,
            grid={"init_cluster_params": [np.zeros((2, 3))]},
            rounds=1,
            options={"learning_rate": 0.01, "init_cluster_params": fc.PerRun(_starts)},
        )
    with pytest.raises(ValueError, match="TaskGrid.build must be a function"):
        fc.TaskGrid(3, {})
    with pytest.raises(ValueError, match="PerRun needs a function"):
        fc.PerRun(0.5)


def test_study_takes_candidates_and_its_former_per_algorithm_keywords():
    shared = dict(rounds=2, seeds=[0, 1, 2], grid={"learning_rate": [0.01, 0.02]})
    new = fc.study(
        [fc.Candidate("local", options={"momentum": 0.0}), fc.Candidate("global", grid={"momentum": [0.0, 0.5]})],
        _task_of,
        **shared,
        evaluation=fc.Evaluation(eval_every=2),
        output=QUIET,
    )
    with pytest.warns(DeprecationWarning) as caught:
        old = fc.study(
            ["local", "global"],
            _task_of,
            **shared,
            algorithm_grids={"global": {"momentum": [0.0, 0.5]}},
            algorithm_options={"local": {"momentum": 0.0}},
            eval_every=2,
            progress=False,
        )
    messages = _deprecated(caught)
    assert any("algorithm_grids= keyword is deprecated" in m and "Candidate" in m for m in messages)
    assert [a["name"] for a in new.arms] == [a["name"] for a in old.arms]
    assert [a["name"] for a in new.arms] == ["local", "global[momentum=0]", "global[momentum=0.5]"]
    assert new.table == old.table and new.paired == old.paired
    with pytest.raises(ValueError, match="not an algorithm of the study"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fc.study(["local", "global"], _task_of, **shared, algorithm_grids={"ditto": {"lam": [0.1, 1.0]}})
    with pytest.raises(ValueError, match="local: algorithm 'local' takes no option 'radius'"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            fc.study(["local", "global"], _task_of, **shared, algorithm_options={"local": {"radius": 1.0}})
    with pytest.raises(ValueError, match="a registered name or a Candidate"), warnings.catch_warnings():
        warnings.simplefilter("ignore", FewSeedsWarning)
        fc.study(["local", 3], _task_of, rounds=1, seeds=[0])


def test_run_scheme_takes_its_settings_and_its_former_keywords():
    import jax.numpy as jnp

    low, high = jnp.array([1.0, 0.0]), jnp.array([0.0, 0.5])

    def loss_low(x):
        return 0.1 * jnp.sum((x - low) ** 2)

    def loss_high(x):
        return 0.1 * jnp.sum((x - high) ** 2)

    x_low, x_high = jnp.array([2.0, 1.0]), jnp.array([0.2, 0.6])
    settings = SchemeSettings(lr_high=0.5, lr_low=1.0, q_max=0.95, max_inner=20)
    new = run_scheme("defection-free", loss_low, loss_high, x_low, x_high, rounds=20, settings=settings)
    with pytest.warns(DeprecationWarning, match=r"run_scheme\(\)'s lr_high= keyword") as caught:
        old = run_scheme(
            "defection-free", loss_low, loss_high, x_low, x_high, rounds=20, lr_high=0.5, lr_low=1.0, q_max=0.95,
            max_inner=20,
        )  # fmt: skip
    _deprecated(caught)
    np.testing.assert_array_equal(new.q_low, old.q_low)
    np.testing.assert_array_equal(new.q_high, old.q_high)
    with pytest.raises(TypeError, match="needs settings"):
        run_scheme("complete", loss_low, loss_high, x_low, x_high, rounds=2)
    with pytest.raises(ValueError, match="not both"):
        run_scheme("complete", loss_low, loss_high, x_low, x_high, rounds=2, settings=settings, lr_low=1.0)
