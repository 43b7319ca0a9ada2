"""Each algorithm's hyperparameter record (issue 64): static and traced fields read from the builders' type hints,
the same static names the hand-written lists held before them (and the integers they missed), make_algorithm
building from a record as from its keywords, a plugin declaring its kinds by its hints, and sweeps grouping runs
into programs by the static part only."""

import json
import typing
from typing import Literal, Optional, Union

import jax
import numpy as np
import pytest
from test_plugins import NAME as PLUGIN
from test_plugins import plugin  # noqa: F401 - the demo plugin, registered while a test runs

import fedjax_clust as fc
from fedjax_clust.algorithms import (
    ALGORITHMS,
    algorithm_spec,
    hyperparameters,
    hyperparameters_class,
    make_algorithm,
    static_hyperparameters,
)
from fedjax_clust.algorithms.factory import shared_keywords
from fedjax_clust.algorithms.registry import unregister_algorithm
from fedjax_clust.core.hyperparameter_kinds import Static, is_static_hint
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.sweep import sweep

# the static lists the built-in specs declared by hand before the records (static_hparams); the record must keep
# every one of them static
FORMER_STATIC = {
    "federated-clustering": (
        "clustering_steps",
        "subgroups",
        "local_steps_form",
        "chunk_size",
        "memory_budget",
        "mesh",
        "track_clusters",
        "quantile_select",
    ),
    "myopic-clustering": ("kmeans_steps",),
    "momentum-clustering": ("clustering_steps", "quantile_select"),
    "hypcluster": ("cluster_steps",),
    "cfl": ("split_power_steps",),
    "knn-per": ("k",),
    "srfca": ("beta", "min_size", "one_shot_rounds", "refine_steps", "refine_iterations", "chunk_size"),
    "three-stage": ("beta", "clustering_steps", "erm_rounds", "fedavg_steps", "weiszfeld_steps"),
    "fedsoft": ("estimation_interval",),
}
FORMER_SHARED = (
    "batch_size",
    "local_steps",
    "num_clusters",
    "momentum_form",
    "optimizer",
    "matmul_precision",
    "participation",
    "dp_epsilon",
    "dp_delta",
    "dp_sampling",
    "dp_rounds",
    "dp_slots",
    "dp_count_noise_ratio",
    "dp_clip_quantile",
    "dp_clip_lr",
    "dp_clip_count_noise",
)


def test_the_kind_rule_reads_the_hint():
    for hint in (float, Optional[float], Union[float, Literal["theory"], None], Union[int, float]):
        assert not is_static_hint(hint), hint
    for hint in (
        int,
        Optional[int],
        bool,
        str,
        Literal["a", "b"],
        None,
        Static[float],
        Optional[Static[float]],
        Static[Union[int, float, None]],
        typing.Callable,
    ):
        assert is_static_hint(hint), hint


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_record_keeps_the_former_static_names_and_traces_only_floats(name):
    cls = hyperparameters_class(name)
    static, traced = set(cls.static_names()), set(cls.traced_names())
    fields = static | traced
    assert static.isdisjoint(traced) and "seed" in static_hyperparameters(name)
    assert {n for n in FORMER_STATIC.get(name, ()) + FORMER_SHARED if n in fields} <= static
    spec = algorithm_spec(name)
    hints = {p.name: typing.get_type_hints(f, include_extras=True)[p.name] for p, f in shared_keywords()}
    for field in traced:  # a traced field is a number: its hint has a float arm (an option group's: in its class)
        hint = hints.get(field) or typing.get_type_hints(spec.option_source(field), include_extras=True)[field]
        assert not is_static_hint(hint), (name, field)
    assert "learning_rate" in traced


def test_integers_the_lists_missed_are_static_now():
    """Ditto's personal_steps and CFL's max_clusters / min_rounds are integers the hand-written lists left out (a
    sweep would have traced a loop count); the record makes them static."""
    assert "personal_steps" in hyperparameters_class("ditto").static_names()
    assert {"max_clusters", "min_rounds"} <= set(hyperparameters_class("cfl").static_names())


def test_make_algorithm_builds_from_a_record_as_from_its_keywords():
    task = fc.make_task("synthetic", num_clusters=2, clients_per_cluster=4, seed=0)
    record = hyperparameters("federated-clustering", learning_rate=0.01, quantile=0.25, clustering_steps=3)
    assert record.static_part()["clustering_steps"] == 3 and record.traced_part()["quantile"] == 0.25
    from_record = make_algorithm("federated-clustering", task, record)
    from_keywords = make_algorithm("federated-clustering", task, learning_rate=0.01, quantile=0.25, clustering_steps=3)
    assert from_record.hparams == from_keywords.hparams
    states = []
    for algo in (from_record, from_keywords):
        state = algo.init(task.init_params(None), task.num_clients)
        states.append(jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(0))[0].params)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), *states)
    assert record.replace(quantile=0.5).quantile == 0.5
    with pytest.raises(ValueError, match="did you mean 'quantile'"):
        record.replace(quantil=0.5)
    with pytest.raises(ValueError, match="give momentum inside the hyperparameters record"):
        make_algorithm("federated-clustering", task, record, momentum=0.5)
    with pytest.raises(ValueError, match="'federated-clustering''s, not 'global''s"):
        make_algorithm("global", task, record)
    with pytest.raises(ValueError, match="needs learning_rate"):
        hyperparameters("global")


def test_the_record_is_what_run_json_holds_and_what_drivers_read(tmp_path):
    """The algorithm carries the record it was built from (keywords or record alike); run.json writes it,
    its static and traced fields apart, arrays by digest; drivers read the typed Execution, not hparams."""
    task = fc.make_task("synthetic", num_clusters=2, clients_per_cluster=4, seed=0)
    algo = make_algorithm("federated-clustering", task, learning_rate=0.01, quantile=0.25, subgroups=2, batch_size=3)
    assert algo.hyperparameters == hyperparameters(
        "federated-clustering", learning_rate=0.01, quantile=0.25, subgroups=2, batch_size=3
    )
    assert make_algorithm("federated-clustering", task, algo.hyperparameters).hyperparameters == algo.hyperparameters
    assert (algo.execution.batch_size, algo.execution.groups, algo.execution.num_clusters) == (3, 2, None)
    ifca = make_algorithm("ifca-2", task, learning_rate=0.1, momentum=0.5)  # momentum: not IFCA's, not recorded
    assert ifca.execution.num_clusters == 2 and ifca.hyperparameters.num_clusters is None  # chose none: the task's
    assert "momentum" not in ifca.hyperparameters.options()
    trace = np.ones((5, task.num_clients), bool)
    trace[1, :3] = False
    out = tmp_path / "run"
    available = make_algorithm("global", task, learning_rate=0.1, participation=fc.Participation(availability=trace))
    fc.simulate(
        available,
        task,
        rounds=2,
        seed=0,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=str(out)),
    )
    recorded = json.loads((out / "run.json").read_text())["config"]["hyperparameters"]
    assert recorded["algorithm"] == "global" and recorded["traced"]["learning_rate"] == 0.1
    assert "learning_rate" not in recorded["static"] and recorded["static"]["batch_size"] is None
    assert recorded["static"]["availability"]["shape"] == [5, task.num_clients]  # by digest, not 40 booleans
    assert (
        recorded["static"]["availability"]["sha1"]
        != make_algorithm(
            "global", task, learning_rate=0.1, participation=fc.Participation(availability=np.ones_like(trace))
        ).hyperparameters.describe()["static"]["availability"]["sha1"]
    )
    with pytest.raises(ValueError, match="batch"):  # the driver checks the recorded batch against its task
        fc.simulate(
            algo,
            fc.make_task("synthetic", num_clusters=2, clients_per_cluster=4, samples_per_client=2),
            rounds=1,
            output=Output(progress=False),
        )


def test_a_plugin_declares_its_kinds_by_its_hints_and_sweeps_compile_it_once(plugin):  # noqa: F811
    """The demo plugin's ``clip: float`` and ``mix: float`` are traced, its untyped ``batch_size`` static: a sweep
    over two mixes and two seeds is one program; a sweep over Ditto's integer personal_steps is one per value."""
    cls = hyperparameters_class(PLUGIN)
    assert {"clip", "mix", "learning_rate"} <= set(cls.traced_names()) and "batch_size" in cls.static_names()
    task = fc.make_task("synthetic", num_clusters=2, clients_per_cluster=3, seed=0)
    swept = sweep(
        PLUGIN,
        task,
        grid={"mix": [0.2, 0.8]},
        seeds=[0, 1],
        options={"learning_rate": 0.001},
        rounds=2,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    assert len(swept.runs) == 4 and len(swept.programs) == 1
    ditto = sweep(
        "ditto",
        task,
        grid={"personal_steps": [1, 2]},
        seeds=[0],
        options={"learning_rate": 0.001},
        rounds=2,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    assert len(ditto.programs) == 2


def test_a_plugins_declared_static_names_stay_static(plugin):  # noqa: F811
    """A spec's ``static_hparams`` (deprecated) still keeps a float it names out of the traced ones: a sweep over
    it is a program per value."""
    import dataclasses

    from fedjax_clust.run.sweep import static_hparams, traced_hparams

    spec = dataclasses.replace(plugin.SPEC, name="mix-static", static_hparams=("mix",))
    fc.register_algorithm(spec)
    try:
        assert "mix" not in traced_hparams("mix-static") and "mix" in static_hparams("mix-static")
        assert "mix" in traced_hparams(PLUGIN)
        task = fc.make_task("synthetic", num_clusters=2, clients_per_cluster=3, seed=0)
        swept = sweep(
            "mix-static",
            task,
            grid={"mix": [0.2, 0.8]},
            seeds=[0],
            options={"learning_rate": 0.001},
            rounds=2,
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False),
        )
        assert len(swept.programs) == 2
    finally:
        unregister_algorithm("mix-static")
