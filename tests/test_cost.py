"""The cost model: FLOPs and bytes counted from a program's jaxpr (loops times their trip counts, the stage a
round runs), and the calibrated roofline that turns them into seconds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fedjax_clust as fc
from fedjax_clust.cost import count
from fedjax_clust.cost.counting import Cost, has_loops
from fedjax_clust.cost.roofline import Calibration, Machine, fit, floor_seconds, project, roofline_seconds
from fedjax_clust.cost.rounds import round_cost


def test_a_matmul_counts_two_flops_per_multiply_add_and_its_operands_bytes():
    a, b = jnp.ones((8, 32)), jnp.ones((32, 5))
    cost = count(jnp.matmul, a, b)
    assert cost.flops == 2 * 8 * 32 * 5
    assert cost.bytes == 4 * (8 * 32 + 32 * 5 + 8 * 5)
    assert cost.kernels == 1 and not cost.open_loops


def test_a_shard_map_counts_its_per_shard_program_once_per_shard_of_its_manual_axes():
    """A program sharded over the 4-way axis of a 4 x 2 mesh runs its per-shard matmul (2 of the 8 rows) on 4
    shards: the whole matmul's FLOPs; manual over both axes, the 2 shards along the other axis repeat it."""
    from jax.sharding import AbstractMesh
    from jax.sharding import PartitionSpec as P

    mesh = AbstractMesh((4, 2), ("c", "d"))
    a, b = np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)
    whole = count(jnp.matmul, a, b).flops
    for axes, repeats in (({"c"}, 1), ({"c", "d"}, 2)):
        sharded = jax.shard_map(
            jnp.matmul, mesh=mesh, in_specs=(P("c"), P()), out_specs=P("c"), axis_names=axes, check_vma=False
        )
        assert count(sharded, a, b).flops == whole * repeats


def test_a_prng_key_made_from_a_constant_is_left_unfolded_and_its_bits_are_counted():
    """The key's ops have known inputs but a key is not an array NumPy holds: the walk leaves it unknown
    (instead of failing) and counts the threefry arithmetic that makes the bits."""
    cost = count(lambda x: x + jax.random.uniform(jax.random.split(jax.random.key(0))[0], (3,)), np.ones(3, np.float32))
    assert cost.flops > 3 and not cost.open_loops


def test_loops_count_their_body_times_the_trip_count_where_xla_counts_it_once():
    w = jnp.ones((16, 16))

    def steps(x, n):
        return lax.fori_loop(0, n, lambda i, v: v @ w, x)

    x = jnp.ones((4, 16))
    one, ten = count(lambda v: steps(v, 1), x), count(lambda v: steps(v, 10), x)
    assert one.flops == 2 * 4 * 16 * 16 + 1  # the matmul and the loop counter's increment
    assert ten.flops == 10 * one.flops
    compiled = jax.jit(lambda v: steps(v, 10)).lower(x).compile().cost_analysis()
    compiled = compiled[0] if isinstance(compiled, (list, tuple)) else compiled
    assert compiled["flops"] < 2 * one.flops  # XLA's analysis: the body once
    chunks = count(lambda v: lax.map(lambda row: row @ w, v), jnp.ones((8, 16)))  # lax.map: a scan over rows
    assert chunks.flops == 8 * 2 * 16 * 16
    assert has_loops(jax.make_jaxpr(lambda v: steps(v, 3))(x).jaxpr)
    assert not has_loops(jax.make_jaxpr(jnp.tanh)(x).jaxpr)


def test_a_data_dependent_loop_is_counted_once_and_listed():
    def halve(v):
        return lax.while_loop(lambda c: jnp.sum(c) > 1.0, lambda c: c @ (0.5 * jnp.eye(3)), v)

    cost = count(halve, jnp.ones((2, 3)))
    assert len(cost.open_loops) == 1
    name, flops, _ = cost.open_loops[0]
    assert name == "while" and flops >= 2 * 2 * 3 * 3


def test_a_branch_counts_the_one_taken_when_its_index_is_known_else_the_costliest():
    def staged(t, x):
        return lax.cond(t >= 5, lambda: x * 2.0, lambda: x @ x)

    x = jnp.ones((6, 6))
    late = count(lambda v: staged(jnp.int32(7), v), x)
    early = count(lambda v: staged(jnp.int32(2), v), x)
    unknown = count(staged, jnp.int32(0), x)
    assert early.flops > 2 * 6 * 6 * 6 - 1 and late.flops < 40
    assert unknown.flops == early.flops and unknown.branches == 1 and late.branches == early.branches == 0
    assert unknown.branch_flops == early.flops - late.flops  # the matmul branch less the doubling
    assert unknown.branch_share() > 0.9 and late.branch_share() == 0.0


def test_a_convolution_counts_its_window_and_input_channels():
    x, k = jnp.ones((2, 10, 10, 3)), jnp.ones((3, 3, 3, 8))  # NHWC, HWIO, SAME
    conv = lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))  # noqa: E731
    assert count(conv, x, k).flops == 2 * (2 * 10 * 10 * 8) * 3 * 3 * 3


def test_the_counted_fc_round_covers_the_per_pair_formula_on_the_synthetic_task():
    """The cross-gradient and Threshold-Clustering terms the bench's per-pair count writes out are in the
    program; the count adds what the formula leaves out (the selection's passes, momentum, sampling)."""
    from fedjax_clust.bench.rounds import fc_round_flops

    task = fc.synthetic_regression(num_clusters=4, clients_per_cluster=16, samples_per_client=9, dim=10)
    algo = fc.make_algorithm("federated-clustering", task, learning_rate=0.01, track_clusters=False)
    state = algo.init(task.init_params(None), task.num_clients)
    cost, loops = round_cost(algo, state, task.data, 3)
    formula = fc_round_flops(task.num_clients, 9, 10, 10)
    assert loops and formula <= cost.flops <= 3 * formula


def test_a_staged_round_counts_the_stage_of_its_round_number():
    """SR-FCA clusters once (ONE_SHOT) in its first rounds and refines afterwards: the count follows the round."""
    task = fc.synthetic_regression(num_clusters=2, clients_per_cluster=8, seed=0)
    algo = fc.make_algorithm(
        "srfca",
        task,
        learning_rate=0.01,
        one_shot_rounds=2,
        refine_steps=1 << 20,
        **fc.algorithm_spec("srfca").example_options,
    )
    state = algo.init(task.init_params(None), task.num_clients)
    first, _ = round_cost(algo, state, task.data, 0)
    later, _ = round_cost(algo, state, task.data, 5)
    unknown = count(algo.round, state, task.data, jax.random.PRNGKey(0))  # the round counter traced
    assert first.branches < unknown.branches and later.branches < unknown.branches  # the stage's branch is known
    assert first.flops != later.flops and max(first.flops, later.flops) <= unknown.flops


def test_projection_is_a_roofline_over_a_launch_floor():
    machine = Machine(flops=1e9, bandwidth=1e8, launch=1e-4)
    calibration = Calibration(machine, compute_efficiency=0.5, memory_efficiency=0.25, kernel=1e-6)
    cost = Cost(flops=1e6, bytes=1e5, kernels=10)
    assert floor_seconds(cost, calibration) == pytest.approx(1e-4 + 1e-5)
    assert roofline_seconds(cost, calibration) == pytest.approx(max(1e6 / 5e8, 1e5 / 2.5e7))
    assert project(cost, calibration) == pytest.approx(1.1e-4 + 4e-3)


def test_fit_recovers_the_efficiencies_that_made_the_times():
    machine = Machine(flops=1e11, bandwidth=1e10, launch=1e-5)
    truth = Calibration(machine, compute_efficiency=0.1, memory_efficiency=0.5, kernel=1e-6)
    rng = np.random.default_rng(0)
    costs = [
        Cost(flops=f, bytes=b, kernels=k)
        for f, b, k in zip(10 ** rng.uniform(5, 10, 40), 10 ** rng.uniform(4, 9, 40), rng.integers(1, 200, 40))
    ]
    seconds = [project(c, truth) for c in costs]
    got = fit(costs, seconds, machine)
    ratios = [s / project(c, got) for c, s in zip(costs, seconds)]
    assert max(abs(np.log(r)) for r in ratios) < np.log(1.15)
    assert got.compute_efficiency == pytest.approx(0.1, rel=0.15)
    assert got.memory_efficiency == pytest.approx(0.5, rel=0.15)
    with pytest.raises(ValueError, match="three"):
        fit(costs[:2], seconds[:2], machine)
