"""One contract for every registered robust aggregator and Byzantine attack (optax's alias_test is the model; see
tests/test_contract.py for the algorithms), and the registries themselves.

Aggregators: on identical messages every rule returns that message (the mean); a row outside ``members``,
however wild, changes nothing (the result equals the rule's on the other rows alone); with no usable message
the result is NaN; the result has one message's structure and dtype, under jit. Attacks: with no attacker the
messages come back bit for bit, in either client-axis layout; with attackers the honest rows do; an identity
attack (a toy one registered here, large-gradient at scale 1, sign-flip at scale -1) is bit-identical. The
demo plugin of tests/plugin_demo/fedjax_robust_plugin_demo.py takes the same contract, and rules built to break
it are shown to fail it (so the checks can fail)."""

import dataclasses
import importlib.metadata
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_plugins import DEMO

import fedjax_clust as fc
from fedjax_clust.cli.options import describe
from fedjax_clust.robust import (
    AGGREGATORS,
    ATTACKS,
    DATA_ATTACKS,
    NEEDS_BALL,
    AggregatorSpec,
    AttackSpec,
    aggregator_names,
    aggregator_spec,
    attack_names,
    attack_spec,
    make_aggregator,
    make_attack,
    register_aggregator,
    register_attack,
    registry,
    replace_byzantine,
    unregister_aggregator,
    unregister_attack,
)
from fedjax_clust.robust.aggregators import resolve_aggregator

sys.path.insert(0, str(DEMO))
import fedjax_robust_plugin_demo as demo  # noqa: E402

sys.path.remove(str(DEMO))

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module", autouse=True)
def demo_plugin():
    """The demo plugin's rules, registered for this module (the contract covers them too)."""
    register_aggregator(demo.AGGREGATOR)
    register_attack(demo.ATTACK)
    yield
    unregister_aggregator(demo.AGGREGATOR.name)
    unregister_attack(demo.ATTACK.name)


AGGREGATOR_NAMES = aggregator_names() + (demo.AGGREGATOR.name,)
ATTACK_NAMES = attack_names() + (demo.ATTACK.name,)


def _tree(n, rng=RNG):
    """A message of two leaves (3 and 2 x 2 coordinates) for each of n clients."""
    return {
        "a": jnp.asarray(rng.standard_normal((n, 3)).astype(np.float32) * 2.0 + 1.0),
        "b": jnp.asarray(rng.standard_normal((n, 2, 2)).astype(np.float32) - 0.5),
    }


def _close(got, want, rtol=1e-5, atol=1e-6):
    jax.tree.map(lambda g, w: np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol), got, want)


def _same(got, want):
    jax.tree.map(lambda g, w: np.testing.assert_array_equal(np.asarray(g), np.asarray(w)), got, want)


# ------------------------------------------------------------------------------------------------ aggregators
def check_identical_messages(rule):
    """On 7 copies of one message the rule returns it (the mean of the copies), under jit."""
    one = jax.tree.map(lambda x: x[0], _tree(1))
    copies = jax.tree.map(lambda x: jnp.broadcast_to(x, (7,) + x.shape), one)
    got = jax.jit(lambda m: rule(m))(copies)
    assert jax.tree.structure(got) == jax.tree.structure(one)
    for g, x in zip(jax.tree.leaves(got), jax.tree.leaves(one)):
        assert g.shape == x.shape and g.dtype == x.dtype
    _close(got, one)
    _close(got, make_aggregator("mean")(copies))


def check_masked_row_ignored(rule):
    """A row outside ``members`` holding wild (finite) values, first or in the middle, changes nothing: the
    result equals the rule's on the other rows alone."""
    messages = _tree(9)
    for row in (0, 4):
        wild = jax.tree.map(
            lambda x: x.at[row].set(3e7 * (1 + jnp.arange(x[row].size, dtype=x.dtype).reshape(x.shape[1:]))), messages
        )
        members = np.ones(9, bool)
        members[row] = False
        got = jax.jit(lambda m, mem: rule(m, mem))(wild, jnp.asarray(members))
        alone = rule(jax.tree.map(lambda x: jnp.delete(x, row, axis=0), messages))
        _close(got, alone)


def check_no_member_is_nan(rule):
    got = rule(_tree(5), jnp.zeros(5, bool))
    assert all(np.isnan(np.asarray(leaf)).all() for leaf in jax.tree.leaves(got))


def check_mean_when_it_says_so(rule):
    """Where the spec's ``mean_for`` says the rule is the mean for n rows, it is, for random members."""
    mean = make_aggregator("mean")
    for n in range(1, 13):
        if rule.equals_mean(n):
            messages = _tree(n)
            members = jnp.asarray(RNG.random(n) < 0.7).at[0].set(True)
            _close(rule(messages, members), mean(messages, members))


@pytest.mark.parametrize("name", AGGREGATOR_NAMES)
def test_every_aggregator_keeps_the_contract(name):
    rule = make_aggregator(name)
    assert rule.aggregator_name == name and resolve_aggregator(name).aggregator_name == name
    assert hash(rule) == hash(rule) and rule == rule and rule != make_aggregator(name)  # identity, as a partial
    check_identical_messages(rule)
    check_masked_row_ignored(rule)
    check_no_member_is_nan(rule)
    check_mean_when_it_says_so(rule)


def test_a_trimmed_mean_that_trims_nothing_takes_the_means_path():
    """floor(beta c) = 0 for every count of at most n rows: the trimmed mean is the mean (beta = 0.1: up to 9
    rows, not 10), and aggregate_segments then averages every group in one pass, with the per-group result
    and member counts of the general path (NumPy reference)."""
    from fedjax_clust.robust.aggregators import aggregate_segments

    rule = make_aggregator("trimmed-mean", beta=0.1)
    assert rule.equals_mean(9) and not rule.equals_mean(10) and make_aggregator("mean").equals_mean(10**6)
    assert not make_aggregator("median").equals_mean(3)
    x = RNG.standard_normal((9, 5)).astype(np.float32)
    x[4, 1] = np.nan  # unusable: left out of its group
    labels = np.array([0, 0, 2, 2, 2, 0, 3, 3, 3])
    got, members = aggregate_segments(rule, {"w": jnp.asarray(x)}, jnp.asarray(labels), 5)
    for g in range(5):
        rows = (labels == g) & np.all(np.isfinite(x), axis=1)
        want = x[rows].astype(np.float64).mean(0) if rows.any() else np.zeros(5)
        np.testing.assert_allclose(np.asarray(got["w"][g]), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(members), np.bincount(labels, minlength=5))
    with pytest.raises(ValueError, match="mean_for must be a function"):
        AggregatorSpec("x", demo.midrange, mean_for=True)


@pytest.mark.parametrize("name", AGGREGATOR_NAMES)
def test_every_aggregator_spec_documents_itself(name):
    spec = aggregator_spec(name)
    assert len(spec.summary) > 10, name
    for option in spec.options:
        assert describe(spec.function, option), f"{name}: option {option!r} has no Args: entry in its docstring"


def test_the_aggregator_checks_can_fail():
    """A rule that sums instead of averaging fails the identical-messages check; one that ignores ``members``
    fails the masked-row check; one that returns 0 without members fails the NaN check."""

    def total(messages, members=None):
        return jax.tree.map(lambda x: jnp.sum(x, axis=0), messages)

    def everyone(messages, members=None):
        return make_aggregator("mean")(messages)

    with pytest.raises(AssertionError):
        check_identical_messages(total)
    check_identical_messages(everyone)
    with pytest.raises(AssertionError):
        check_masked_row_ignored(everyone)
    with pytest.raises(AssertionError):
        check_no_member_is_nan(lambda messages, members=None: jax.tree.map(lambda x: jnp.zeros(x.shape[1:]), messages))


# ---------------------------------------------------------------------------------------------------- attacks
BYZANTINE = np.array([False, True, False, False, True, False, True, False])


def _attack_args(name):
    """The victim's ball for an attack that needs one (a centre message, a radius)."""
    if attack_spec(name).needs_ball:
        return dict(center={"a": jnp.asarray([1.0, 2.0, 2.0]), "b": jnp.ones((2, 2))}, radius=3.0)
    return {}


def check_no_attacker_no_change(attack, **ball):
    """Without attackers (an all-False mask) the messages come back bit for bit, in both layouts, under jit."""
    messages = _tree(8)
    nobody = jnp.zeros(8, bool)
    got = jax.jit(lambda m, b, k: attack(m, b, k, **ball))(messages, nobody, jax.random.PRNGKey(0))
    _same(got, messages)
    last = jax.tree.map(lambda x: jnp.moveaxis(x, 0, -1), messages)
    _same(attack(last, nobody, jax.random.PRNGKey(0), axis=-1, **ball), last)


def check_honest_rows_kept(attack, **ball):
    """With attackers, the honest rows come back bit for bit, in the messages' structure and dtypes."""
    messages = _tree(8)
    got = jax.jit(lambda m, b, k: attack(m, b, k, **ball))(messages, jnp.asarray(BYZANTINE), jax.random.PRNGKey(1))
    assert jax.tree.structure(got) == jax.tree.structure(messages)
    for g, x in zip(jax.tree.leaves(got), jax.tree.leaves(messages)):
        assert g.shape == x.shape and g.dtype == x.dtype
        np.testing.assert_array_equal(np.asarray(g)[~BYZANTINE], np.asarray(x)[~BYZANTINE])


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_every_attack_keeps_the_contract(name):
    attack = make_attack(name)
    spec = attack_spec(name)
    assert attack.attack_name == name and attack.needs_ball == spec.needs_ball and attack.on_data == spec.on_data
    if spec.on_data:  # a data attack: make_algorithm applies it; its messages are not its to replace
        with pytest.raises(ValueError, match="training data"):
            attack(_tree(8), jnp.asarray(BYZANTINE), jax.random.PRNGKey(0))
        return
    check_no_attacker_no_change(attack, **_attack_args(name))
    check_honest_rows_kept(attack, **_attack_args(name))


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_every_attack_spec_documents_itself(name):
    spec = attack_spec(name)
    assert len(spec.summary) > 10, name
    assert not set(spec.options) & set(registry.ATTACK_CALL_KEYWORDS)
    for option in spec.options:
        assert describe(spec.function, option), f"{name}: option {option!r} has no Args: entry in its docstring"


def test_identity_attacks_leave_the_messages_bit_identical():
    @register_attack("toy-identity")
    def identity(messages, byzantine, key, *, axis=0, center=None, radius=None):
        """Every attacker sends its honest message (a toy attack of the contract test)."""
        return replace_byzantine(messages, byzantine, messages, axis)

    try:
        messages, byzantine = _tree(8), jnp.asarray(BYZANTINE)
        for attack in (
            make_attack("toy-identity"),
            make_attack("large-gradient", scale=1.0),
            make_attack("sign-flip", scale=-1.0),
            make_attack("bit-flip", scale=-1.0),
        ):
            _same(jax.jit(lambda m, b: attack(m, b, None))(messages, byzantine), messages)
            check_no_attacker_no_change(attack)
        # by its name, through make_algorithm: one round equals the attack-free round (to float32 rounding, as in
        # tests/test_contract.py: the select can change XLA's fusion)
        task = fc.synthetic_regression(num_clusters=2, clients_per_cluster=4, seed=3)
        attacked = fc.mark_byzantine(task, fraction=0.25, seed=0)
        key = jax.random.PRNGKey(2)
        rounds = []
        for t, attack in ((task, None), (attacked, "toy-identity")):
            algo = fc.make_algorithm("global", t, learning_rate=0.01, attack=attack, aggregator="median")
            state = algo.init(t.init_params(None), t.num_clients)
            rounds.append(jax.jit(algo.round)(state, t.data, key)[0].params)
        _close(rounds[1], rounds[0], rtol=1e-6, atol=1e-9)
        assert algo.hparams["attack"] == "toy-identity"
    finally:
        unregister_attack("toy-identity")


def test_the_attack_checks_can_fail():
    """An attack that scales every row fails both checks; one that writes its rows along axis 0 whatever the
    layout fails the layout half of the first."""

    def everyone(messages, byzantine, key, *, axis=0, center=None, radius=None):
        return jax.tree.map(lambda x: 2.0 * x, messages)

    def first_axis(messages, byzantine, key, *, axis=0, center=None, radius=None):
        return jax.tree.map(lambda x: x.at[0].set(0.0), messages) if axis != 0 else messages

    with pytest.raises(AssertionError):
        check_no_attacker_no_change(everyone)
    with pytest.raises(AssertionError):
        check_honest_rows_kept(everyone)
    with pytest.raises(AssertionError):
        check_no_attacker_no_change(first_axis)


# --------------------------------------------------------------------------------------------------- registries
def test_the_built_in_lists_come_from_the_registries():
    assert AGGREGATORS == (
        "mean",
        "median",
        "trimmed-mean",
        "geometric-median",
        "krum",
        "multi-krum",
        "centered-clipping",
    )
    assert ATTACKS == (
        "large-gradient",
        "sign-flip",
        "bit-flip",
        "gaussian",
        "alie",
        "ipm",
        "nan",
        "inf",
        "neg-inf",
        "ball-edge",
        "label-flip",
    )
    assert aggregator_names()[: len(AGGREGATORS)] == AGGREGATORS and attack_names()[: len(ATTACKS)] == ATTACKS
    assert NEEDS_BALL == ("ball-edge",) and DATA_ATTACKS == ("label-flip",)
    assert aggregator_spec("trimmed-mean").options == {"beta": 0.1}
    assert aggregator_spec("multi-krum").options == {"fraction": 0.25}  # multi is fixed, not an option
    assert attack_spec("large-gradient").options == {"scale": 100.0}  # axis, center, radius are the call's


def test_registering_refuses_duplicates_and_bad_specs():
    with pytest.raises(ValueError, match="'median' is already registered"):
        register_aggregator(AggregatorSpec("median", demo.midrange))
    with pytest.raises(ValueError, match="'nan' is already registered"):
        register_attack("nan")(demo.zero_message)
    with pytest.raises(ValueError, match="takes an AggregatorSpec or a name"):
        register_aggregator(demo.midrange)
    with pytest.raises(ValueError, match="fixed names 'multi'"):
        AggregatorSpec("x", demo.midrange, fixed={"multi": True})
    with pytest.raises(ValueError, match="non-empty string"):
        AttackSpec(" x", demo.zero_message)
    with pytest.raises(ValueError, match="needs_ball must be a bool"):
        AttackSpec("x", demo.zero_message, needs_ball=1)
    with pytest.raises(ValueError, match="must take the keywords axis, center and radius"):
        AttackSpec("x", lambda messages, byzantine, key, *, axis=0: messages)
    with pytest.raises(ValueError, match="unknown aggregator 'average'; expected one of"):
        make_aggregator("average")
    with pytest.raises(ValueError, match="takes no option 'multi'"):
        make_aggregator("krum", multi=True)
    with pytest.raises(ValueError, match="midrange shrink must be > 0"):
        make_aggregator("midrange", shrink=0.0)
    # replace=True replaces, and the built-in comes back
    original = aggregator_spec("median")
    register_aggregator(AggregatorSpec("median", demo.midrange), replace=True)
    try:
        assert make_aggregator("median").spec.function is demo.midrange
    finally:
        register_aggregator(original, replace=True)
    assert aggregator_names()[: len(AGGREGATORS)] == AGGREGATORS


def _entry_points(monkeypatch, groups):
    """Pretend the packages of ``groups`` (group -> [(name, "module:object")]) are installed; the registries
    load their entry points again."""
    real = importlib.metadata.entry_points

    def entry_points(**selection):
        group = selection.get("group")
        if group in groups:
            return [importlib.metadata.EntryPoint(name, value, group) for name, value in groups[group]]
        return real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registry.AGGREGATOR_REGISTRY, "entry_points_loaded", False)
    monkeypatch.setattr(registry.ATTACK_REGISTRY, "entry_points_loaded", False)


def test_entry_points_load_lazily_and_never_shadow_a_built_in(monkeypatch):
    monkeypatch.syspath_prepend(str(DEMO))
    unregister_aggregator(demo.AGGREGATOR.name)
    try:
        _entry_points(
            monkeypatch,
            {
                "fedjax_clust.aggregators": [
                    ("midrange", "fedjax_robust_plugin_demo:AGGREGATOR"),
                    ("median", "fedjax_robust_plugin_demo:SHADOW"),
                ]
            },
        )
        monkeypatch.setattr(demo, "SHADOW", AggregatorSpec("median", demo.midrange), raising=False)
        assert "midrange" not in registry.AGGREGATOR_REGISTRY.registered()  # nothing loaded yet
        assert aggregator_names() == AGGREGATORS + ("midrange",)
        assert aggregator_spec("median").function is not demo.midrange
        _entry_points(monkeypatch, {"fedjax_clust.attacks": [("broken", "fedjax_robust_plugin_demo:NO_SUCH")]})
        with pytest.raises(ValueError, match="attack plugin 'broken'"):
            attack_names()
    finally:
        monkeypatch.undo()
        if demo.AGGREGATOR.name in registry.AGGREGATOR_REGISTRY.registered():
            unregister_aggregator(demo.AGGREGATOR.name)
        register_aggregator(demo.AGGREGATOR)


def test_specs_hash_by_name_and_serve_as_dict_keys():
    """Every registry's spec hashes (its read-only mapping fields do not): equal specs hash equal, so a set of
    the registered specs has one per name."""
    import fedjax_clust as fc
    from fedjax_clust.robust.registry import aggregator_names, aggregator_spec, attack_names, attack_spec

    specs = [aggregator_spec(n) for n in aggregator_names()] + [attack_spec(n) for n in attack_names()]
    specs += [fc.algorithm_spec(n) for n in fc.algorithm_names()]
    assert len(set(specs + specs)) == len(specs)
    assert hash(aggregator_spec("median")) == hash(dataclasses.replace(aggregator_spec("median")))
