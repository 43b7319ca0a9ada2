"""Per-client rows in host memory (core/host_rows.py, run/streaming.py): every registered algorithm that can
stream gives the resident run's state and metrics bit for bit; the cohorts overlap (the carried rows are
exercised); memory-mapped rows, the unpipelined path, chunked evaluation, the plan and its errors."""

import dataclasses
import json

import jax
import numpy as np
import pytest
from conftest import tiered
from test_contract import SMALL

import fedjax_clust as fc
from fedjax_clust.core.host_rows import (
    RowLayout,
    gather_block,
    host_bytes,
    row_leaves,
    server_part,
    take_to_device,
    to_host,
)
from fedjax_clust.core.keys import init_key
from fedjax_clust.core.pytrees import tree_bytes
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output
from fedjax_clust.run.fused import fuse_rounds
from fedjax_clust.run.placement import Placement
from fedjax_clust.run.simulate import evaluate_state
from fedjax_clust.run.streaming import combine_chunks, evaluate_in_chunks, parse_bytes, plan_rows, streamed_step

N, S = 8, 3


@pytest.fixture(scope="module")
def task():
    return fc.make_task("classification", num_clusters=2, clients_per_cluster=N // 2, seed=0)


def build(name, task, **kwargs):
    options = {**fc.algorithm_spec(name).example_options, **SMALL.get(name, {}), **kwargs}
    return fc.make_algorithm(name, task, learning_rate=0.01, participation=S, **options)


def assert_identical(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for u, v in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


STREAMING = [
    n
    for n in fc.algorithm_names()
    if build(n, fc.make_task("classification", num_clusters=2, clients_per_cluster=N // 2, seed=0)).execution.cohort
    is not None
]


def test_streaming_covers_the_algorithms_that_own_rows():
    # the ones that cannot: a round that needs every client (masked participation); Global, Ground-truth and
    # kNN-Per (its global model) stream their server table's assignment
    assert set(fc.algorithm_names()) - set(STREAMING) == {"srfca", "three-stage"}


@pytest.mark.default_codegen  # bit for bit: on the default fusion generator (conftest)
@pytest.mark.parametrize("name", tiered(STREAMING))
def test_host_rows_equal_resident_bit_for_bit(name, task):
    algo = build(name, task)
    device = fc.simulate(
        algo,
        task,
        rounds=4,
        placement=Placement(client_rows="device"),
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    host = fc.simulate(
        algo,
        task,
        rounds=4,
        placement=Placement(client_rows="host"),
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    assert all(isinstance(x, np.ndarray) for x in row_leaves(host.state)[0])
    assert_identical(device.state, host.state)
    assert device.history == host.history
    assert host.summary["client_rows"]["client_rows"] == "host"
    assert "client_rows" not in device.summary


@pytest.mark.parametrize("name", tiered(STREAMING))
def test_a_host_start_leaves_the_algorithm_usable(name, task):
    # the host start deletes the device leaves it copied: an init returning an array the algorithm itself
    # holds (Global's group labels) would break the algorithm's next start or round
    from fedjax_clust.run.placement import host_start

    algo = build(name, task)
    params = task.init_params(jax.random.PRNGKey(0))
    first = host_start(algo, params, N, jax.random.PRNGKey(1), None)
    second = host_start(algo, params, N, jax.random.PRNGKey(1), None)
    assert_identical(first, second)
    resident = algo.start(params, N, jax.random.PRNGKey(1))
    jax.block_until_ready(jax.jit(algo.round)(resident, task.data, jax.random.PRNGKey(2)))


def test_subgroups_within_the_cohort_and_an_availability_trace_stream_bit_for_bit(task):
    """The cohort paths that pick clients within a round keep working on streamed rows: Federated-Clustering's
    random subgroups of the cohort, and participants drawn among those an availability trace marks."""
    trace = np.ones((6, N), bool)
    trace[np.arange(6), np.arange(6) % N] = False  # one client away each round
    trace[np.arange(6), (np.arange(6) + 3) % N] = False
    cases = [
        ("federated-clustering", dict(subgroups=2, participation=4, quantile=0.2, batch_size=4)),
        ("ditto", dict(participation=fc.Participation(availability=trace))),
    ]
    for name, options in cases:
        algo = fc.make_algorithm(name, task, learning_rate=0.01, **options)
        device = fc.simulate(
            algo,
            task,
            rounds=5,
            placement=Placement(client_rows="device"),
            evaluation=Evaluation(eval_every=5),
            output=Output(progress=False),
        )
        host = fc.simulate(
            algo,
            task,
            rounds=5,
            placement=Placement(client_rows="host"),
            evaluation=Evaluation(eval_every=5),
            output=Output(progress=False),
        )
        assert host.summary["client_rows"]["client_rows"] == "host", name
        assert_identical(device.state, host.state)
        assert device.history == host.history, name


def test_a_stretch_with_overlapping_cohorts_equals_the_fused_resident_rounds(task):
    algo = build("momentum-clustering", task)
    key = jax.random.PRNGKey(0)
    start = algo.start(task.init_params(jax.random.fold_in(key, 0)), N, init_key(key))
    round_key = jax.random.fold_in(key, 1)
    cohort = algo.execution.cohort
    draws = [set(np.asarray(cohort.draw(jax.random.fold_in(round_key, t), t - 1)).tolist()) for t in range(1, 5)]
    assert any(draws[i] & draws[i + 1] for i in range(3))  # the carry on the device runs with real overlaps
    resident, _ = fuse_rounds(algo.round)(start, task.data, round_key, 1, 4)
    host, _ = streamed_step(algo, task.data, round_key)(to_host(start), 1, 4)
    assert_identical(resident, host)


def test_memory_mapped_rows_and_the_unpipelined_path(task, tmp_path):
    algo = build("ditto", task)
    resident = fc.simulate(
        algo,
        task,
        rounds=3,
        placement=Placement(client_rows="device"),
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )
    mapped = fc.simulate(
        algo,
        task,
        rounds=3,
        placement=Placement(client_rows="host", host_rows_dir=str(tmp_path)),
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )
    assert isinstance(RowLayout.of(mapped.state).buffers["float32"], np.memmap)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.float32.npy"]  # one file per dtype
    again = fc.simulate(
        algo,
        task,
        rounds=3,
        placement=Placement(client_rows="host", host_rows_dir=str(tmp_path)),
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )  # beside the first run's file, never over it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.float32.1.npy", "rows.float32.npy"]
    assert_identical(mapped.state, again.state)
    assert_identical(resident.state, mapped.state)
    # the serial path (no prefetch) and the pipelined one write the same rows
    key = jax.random.PRNGKey(0)
    start = algo.start(task.init_params(jax.random.fold_in(key, 0)), N, init_key(key))
    runs = []
    for prefetch in (True, False):
        timings = {}
        step = streamed_step(algo, task.data, jax.random.fold_in(key, 1), prefetch=prefetch, timings=timings)
        state, _ = step(to_host(start), 1, 5)
        assert timings["gather"] > 0 and timings["scatter"] > 0 and timings["wait"] >= 0
        runs.append(state)
    assert_identical(*runs)


def test_rows_are_packed_one_buffer_per_dtype_and_round_trip(task, tmp_path):
    algo = build("ifca-1", task)  # a model table's assignment (int32) and its labels beside float rows
    start = algo.start(task.init_params(jax.random.PRNGKey(0)), N, jax.random.PRNGKey(1))
    state = to_host(start)
    layout = RowLayout.of(state)
    assert set(layout.buffers) == {"int32"} and RowLayout.of(state).buffers["int32"] is layout.buffers["int32"]
    local = build("momentum-clustering", task)
    state = to_host(local.start(task.init_params(jax.random.PRNGKey(0)), N, jax.random.PRNGKey(1)), str(tmp_path))
    layout = RowLayout.of(state)
    assert isinstance(layout.buffers["float32"], np.memmap) and (tmp_path / "rows.float32.npy").exists()
    leaves, _ = row_leaves(state)
    before = [np.array(x) for x in leaves]
    index = np.array([1, 4, 6])
    packed = layout.gather(index)
    unpacked = layout.unpack(packed)
    for x, u in zip(before, unpacked):
        np.testing.assert_array_equal(np.asarray(u), x[index])
    layout.write(index, layout.pack([u + 1 if np.issubdtype(u.dtype, np.floating) else u for u in unpacked]))
    rest = np.setdiff1d(np.arange(N), index)
    for x, after in zip(before, row_leaves(layout.state(server_part(state)))[0]):
        bump = 1 if np.issubdtype(x.dtype, np.floating) else 0
        np.testing.assert_array_equal(after[index], x[index] + bump)
        np.testing.assert_array_equal(after[rest], x[rest])


def test_chunked_evaluation_matches_the_whole(task):
    attacked = fc.mark_byzantine(task, fraction=0.25, seed=0)
    algo = build("local", attacked, attack="sign-flip")
    state = fc.simulate(
        algo,
        attacked,
        rounds=2,
        placement=Placement(client_rows="host"),
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    ).state
    evaluate = jax.jit(lambda st, arrays, honest: evaluate_state(algo, attacked.with_arrays(arrays), st, honest))
    host_task = attacked.with_arrays(jax.tree.map(np.asarray, attacked.arrays()))
    whole, count = evaluate_in_chunks(evaluate, host_task, state, N)
    chunked, chunked_count = evaluate_in_chunks(evaluate, host_task, state, 3)  # 3, 3 and 2 (padded) clients
    assert int(count) == chunked_count == 6  # the honest clients
    assert whole.keys() == chunked.keys() and any(k.endswith("_std") for k in whole)
    for key in whole:
        np.testing.assert_allclose(chunked[key], whole[key], rtol=2e-6, atol=1e-7, err_msg=key)
    # the evaluation chunk follows the budget
    shapes = jax.eval_shape(lambda: algo.start(task.init_params(jax.random.PRNGKey(0)), N))
    plan = plan_rows(algo, shapes, attacked.arrays(), budget="1GiB", client_rows="host")
    assert plan.eval_chunk == N


def test_combine_chunks_is_the_mean_and_the_spread_of_the_whole():
    rng = np.random.default_rng(0)
    values = rng.standard_normal(11)
    parts = [({"m": v.mean(), "m_std": v.std()}, v.size) for v in np.split(values, [4, 9])]
    parts.append(({"m": np.nan, "m_std": np.nan}, 0))  # a chunk of padding only
    combined, count = combine_chunks(parts)
    assert count == 11
    np.testing.assert_allclose(combined["m"], values.mean(), rtol=1e-6)
    np.testing.assert_allclose(combined["m_std"], values.std(), rtol=1e-6)


def test_plan_keeps_a_fitting_population_on_the_device_and_streams_a_large_one(task):
    algo = fc.make_algorithm("local", task, learning_rate=0.01, participation=1)  # a cohort small beside N
    shapes = jax.eval_shape(lambda: algo.start(task.init_params(jax.random.PRNGKey(0)), N))
    roomy = plan_rows(algo, shapes, task.arrays(), budget="1GiB")
    assert roomy.where == "device" and roomy.eval_chunk == N
    tight = plan_rows(algo, shapes, task.arrays(), budget=roomy.resident_bytes)  # more than half of it
    assert tight.where == "host" and tight.eval_chunk < N and tight.cohort_bytes <= roomy.resident_bytes
    with pytest.raises(ValueError, match="in flight"):
        plan_rows(algo, shapes, task.arrays(), budget=2 * tight.cohort_bytes - 1)
    everyone = fc.make_algorithm("local", task, learning_rate=0.01)
    with pytest.raises(ValueError, match="every client each round"):
        plan_rows(everyone, shapes, task.arrays(), budget=1000)
    assert plan_rows(everyone, shapes, task.arrays()).where == "device"  # no budget given: as before
    masked = fc.make_algorithm("srfca", task, learning_rate=0.01, participation=S, threshold=1.0)
    with pytest.raises(ValueError, match="masked participation"):
        plan_rows(masked, shapes, task.arrays(), budget=1000)


def test_parse_bytes():
    assert parse_bytes("1GiB") == 2**30 and parse_bytes("512MB") == 512 * 10**6 and parse_bytes(4096) == 4096
    assert parse_bytes("2e9") == 2 * 10**9
    for bad in ("-1", "0", "lots", "1XB", True):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_host_runs_checkpoint_and_resume_exactly_and_the_cli_streams(task, tmp_path, capsys):
    algo = build("momentum-clustering", task)
    whole = fc.simulate(
        algo,
        task,
        rounds=4,
        placement=Placement(client_rows="host"),
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    folder, rows_dir = str(tmp_path / "ck"), tmp_path / "rows"
    rows_dir.mkdir()
    fc.simulate(
        algo,
        task,
        rounds=2,
        placement=Placement(client_rows="host"),
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=folder),
        checkpointing=Checkpointing(checkpoint_every=2),
    )
    resumed = fc.simulate(
        algo,
        task,
        rounds=4,
        placement=Placement(client_rows="host", host_rows_dir=str(rows_dir)),
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=folder, resume=True),
        checkpointing=Checkpointing(checkpoint_every=2),
    )
    assert_identical(whole.state, resumed.state)
    assert whole.history == resumed.history
    assert isinstance(RowLayout.of(resumed.state).buffers["float32"], np.memmap)
    # one file per dtype, restored into: no fresh start was made beside them
    assert sorted(p.name for p in rows_dir.iterdir()) == ["rows.bool.npy", "rows.float32.npy"]
    from fedjax_clust.cli import main

    out = tmp_path / "run"
    args = [
        "run",
        "--algorithm",
        "local",
        "--task",
        "classification",
        "--clusters",
        "2",
        "--clients-per-cluster",
        "4",
        "--participation",
        "1",
        "--rounds",
        "2",
        "--eval-every",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(args + ["--device-memory", "60KB"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["client_rows"]["client_rows"] == "host"
    assert main(args + ["--overwrite", "--device-memory", "lots"]) == 2
    assert "device memory" in capsys.readouterr().err


def test_a_killed_host_run_resumes_exactly_and_leaves_only_its_own_row_files(task, tmp_path):
    """Row files of a run that is refused, killed, or replaced do not pile up: a refused run makes none, a resume
    (restored into a template of shapes, not into a fresh start) removes the killed run's, and ``run.json`` names
    the files of the run that holds the folder."""
    from fedjax_clust.run.loop import Callback
    from fedjax_clust.run.simulate import RunInterrupted

    class KillAfter(Callback):
        def after_evaluation(self, loop, t, rows, bad):
            if t == 2:
                raise KeyboardInterrupt

    algo = build("ditto", task)
    whole = fc.simulate(
        algo,
        task,
        rounds=4,
        placement=Placement(client_rows="host"),
        evaluation=Evaluation(eval_every=1),
        output=Output(progress=False),
    )
    folder, rows_dir = tmp_path / "run", tmp_path / "rows"
    rows_dir.mkdir()
    common = dict(
        evaluation=Evaluation(eval_every=1),
        checkpointing=Checkpointing(checkpoint_every=1),
        placement=Placement(client_rows="host", host_rows_dir=str(rows_dir)),
    )
    quiet = Output(progress=False, out_dir=str(folder))
    with pytest.raises(RunInterrupted):
        fc.simulate(algo, task, rounds=4, callbacks=[KillAfter()], **common, output=quiet)
    killed = sorted(p.name for p in rows_dir.iterdir())
    assert killed == ["rows.float32.npy"]
    recorded = json.loads((folder / "run.json").read_text())["client_rows"]
    assert recorded["files"] == [str(rows_dir / "rows.float32.npy")] and recorded["client_rows"] == "host"
    with pytest.raises(ValueError, match="already holds"):  # refused before any row is made
        fc.simulate(algo, task, rounds=4, **common, output=quiet)
    assert sorted(p.name for p in rows_dir.iterdir()) == killed
    resumed = fc.simulate(algo, task, rounds=4, **common, output=dataclasses.replace(quiet, resume=True))
    assert_identical(whole.state, resumed.state)
    assert whole.history == resumed.history
    assert sorted(p.name for p in rows_dir.iterdir()) == ["rows.float32.1.npy"]  # the killed run's file is gone
    assert json.loads((folder / "run.json").read_text())["client_rows"]["files"] == [
        str(rows_dir / "rows.float32.1.npy")
    ]
    replaced = {**common, "placement": Placement()}
    # a resident run replaces it: its file goes
    fc.simulate(algo, task, rounds=2, **replaced, output=dataclasses.replace(quiet, overwrite=True))
    assert list(rows_dir.iterdir()) == []


def test_the_cli_resumes_a_streamed_run_where_its_rows_were(tmp_path):
    from fedjax_clust.cli import main

    out, rows_dir = tmp_path / "run", tmp_path / "rows"
    rows_dir.mkdir()
    args = [
        "run",
        "--algorithm",
        "local",
        "--task",
        "classification",
        "--clusters",
        "2",
        "--clients-per-cluster",
        "4",
        "--participation",
        "1",
        "--rounds",
        "2",
        "--eval-every",
        "2",
        "--checkpoint-every",
        "2",
        "--no-progress",
        "--out",
        str(out),
        "--device-memory",
        "60KB",
        "--host-rows-dir",
        str(rows_dir),
    ]
    assert main(args) == 0
    assert main(["run", "--out", str(out), "--resume", "--rounds", "4", "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["client_rows"]["client_rows"] == "host" and summary["rounds"] == 4  # the 60KB budget again
    assert [p.name for p in rows_dir.iterdir()] == ["rows.float32.1.npy"]  # in its folder, the first one gone


def test_streaming_refuses_what_it_cannot_stream_exactly(task):
    algo = build("local", task)
    wrapped = algo._replace(apply=lambda state, data, key: algo.apply(state, data, key))  # a wrapper added after
    shapes = jax.eval_shape(lambda: algo.start(task.init_params(jax.random.PRNGKey(0)), N))
    with pytest.raises(ValueError, match="a wrapper replaced"):
        plan_rows(wrapped, shapes, task.arrays(), client_rows="host")
    sampler = fc.participation_rule(N, count=S, sampler=lambda key, t: jax.numpy.array([1, 1, 2]))
    repeated = fc.make_algorithm("local", task, learning_rate=0.01, participation=sampler)
    start = to_host(repeated.start(task.init_params(jax.random.PRNGKey(0)), N))
    with pytest.raises(ValueError, match="distinct"):
        streamed_step(repeated, task.data, jax.random.PRNGKey(1))(start, 1, 1)
    with pytest.raises(ValueError):
        parse_bytes("inf")


def test_a_host_rows_folder_is_checked_before_the_run_and_an_unused_one_is_named_at_the_call(task, tmp_path):
    import warnings

    algo = build("ditto", task)
    with pytest.raises(ValueError, match="does not exist"):  # a mistyped folder, even where nothing streams
        fc.simulate(
            algo,
            task,
            rounds=1,
            placement=Placement(host_rows_dir=str(tmp_path / "typo")),
            output=Output(progress=False),
        )
    with pytest.raises(ValueError, match="client_rows='device'"):
        fc.simulate(
            algo,
            task,
            rounds=1,
            placement=Placement(client_rows="device", host_rows_dir=str(tmp_path)),
            output=Output(progress=False),
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fc.simulate(
            algo, task, rounds=1, placement=Placement(host_rows_dir=str(tmp_path)), output=Output(progress=False)
        )  # fits: stays resident
    unused = [w for w in caught if "is unused" in str(w.message)]
    assert len(unused) == 1 and unused[0].filename == __file__  # points at this call, not at the library
    assert list(tmp_path.iterdir()) == []


def test_global_on_its_server_table_is_gathered_and_equals_the_masked_round(task):
    from fedjax_clust.algorithms.participation import participation_rule, with_participation
    from fedjax_clust.core.state import ClientParams

    rule = participation_rule(N, count=S)
    whole = fc.make_algorithm("global", task, learning_rate=0.05)
    gathered = with_participation(whole, rule)
    masked = with_participation(whole._replace(masked_participation=True), rule)
    assert gathered.execution.cohort is not None and masked.execution.cohort is None
    params = task.init_params(jax.random.PRNGKey(0))
    states = [algo.start(params, N) for algo in (gathered, masked)]
    for t in range(3):
        key = jax.random.PRNGKey(10 + t)
        states = [jax.jit(algo.round)(s, task.data, key)[0] for algo, s in zip((gathered, masked), states)]
    for u, v in zip(jax.tree.leaves(states[0]), jax.tree.leaves(states[1])):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-7)
    assert not np.array_equal(
        np.asarray(jax.tree.leaves(states[0].params.models)[0]),
        np.asarray(jax.tree.leaves(whole.start(params, N).params.models)[0]),
    )  # it trained
    # per-client starts hold rows: every member of a group steps, so the round needs all N and cannot stream
    rows = ClientParams(jax.tree.map(lambda x: np.broadcast_to(x, (N,) + x.shape).copy(), params))
    shapes = jax.eval_shape(lambda: gathered.start(rows, N))
    with pytest.raises(ValueError, match="per-client rows"):
        plan_rows(gathered, shapes, task.arrays(), client_rows="host")
    with pytest.raises(ValueError, match="per-client rows"):
        streamed_step(gathered, task.data, jax.random.PRNGKey(1))(to_host(gathered.start(rows, N)), 1, 1)


def test_the_evaluation_chunk_counts_one_clients_temporaries(task):
    from fedjax_clust.run.streaming import EvaluationChunk

    algo = build("local", task)
    state = to_host(algo.start(task.init_params(jax.random.PRNGKey(0)), N))
    evaluate = jax.jit(lambda st, arrays, honest: evaluate_state(algo, task.with_arrays(arrays), st, honest))
    one = jax.numpy.zeros(1, int)
    block, data = gather_block(state, one), take_to_device({k: v for k, v in task.arrays().items()}, one)
    analysis = evaluate.lower(block, data, jax.numpy.ones(1, bool)).compile().memory_analysis()
    per_client = analysis.temp_size_in_bytes + tree_bytes(block) + tree_bytes(data)
    assert EvaluationChunk(evaluate, N, None)(task, state) == N  # no budget: the plan's chunk
    assert EvaluationChunk(evaluate, N, 10**12)(task, state) == N  # at most the plan's chunk
    assert EvaluationChunk(evaluate, N, 3.5 * per_client)(task, state) == 3
    assert EvaluationChunk(evaluate, N, 1)(task, state) == 1  # at least one client
    # a server model (Global's) is held once, not once per client of the chunk
    wide = fc.make_task(
        "classification",
        num_clusters=2,
        clients_per_cluster=N // 2,
        dim=64,
        hidden=256,
        samples_per_client=4,
        test_samples_per_client=2,
        seed=0,
    )
    server_algo = build("global", wide)
    held = to_host(server_algo.start(wide.init_params(jax.random.PRNGKey(0)), N))
    check = jax.jit(lambda st, arrays, honest: evaluate_state(server_algo, wide.with_arrays(arrays), st, honest))
    block, data = gather_block(held, one), take_to_device(wide.arrays(), one)
    analysis = check.lower(block, data, jax.numpy.ones(1, bool)).compile().memory_analysis()
    per_client = analysis.temp_size_in_bytes + host_bytes(block) + tree_bytes(data)
    server = tree_bytes(server_part(held))
    assert server > 3 * per_client  # the model outweighs one client's evaluation: counting it per client gives 1
    assert EvaluationChunk(check, N, server + 3.5 * per_client)(wide, held) == 3
