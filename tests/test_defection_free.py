"""Collaboration schemes between two competing firms and Algorithm 5 (thesis ch. 3) on a convex task whose
optimum is known: two quadratic losses with different curvatures, each firm starting at its own optimum
(saturated own training, as §3.4 assumes)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust.incentives.defection_free import SchemeSettings, best_quality, run_scheme
from fedjax_clust.incentives.duopoly import nash_objective

A_LOW, A_HIGH = 1 / 16, 1 / 4  # curvatures of f(.; l) and f(.; h)
C_LOW, C_HIGH = jnp.array([1.0, 0.0]), jnp.array([-1.0, 0.0])


def loss_low(x):
    return A_LOW * jnp.sum((x - C_LOW) ** 2)


def loss_high(x):
    return A_HIGH * jnp.sum((x - C_HIGH) ** 2)


def quality(x):
    return 1.0 - 0.5 * (loss_low(x) + loss_high(x))


Q_MAX = 0.9  # at x* = (A_LOW C_LOW + A_HIGH C_HIGH) / (A_LOW + A_HIGH) = (-0.6, 0): f* = 0.1
SMOOTH = A_LOW + A_HIGH  # L of f = (f_l + f_h) / 2: its Hessian is (A_LOW + A_HIGH) I


def run(scheme, x_low=C_LOW, x_high=C_HIGH, rounds=2000, lr_high=0.5 / SMOOTH, lr_low=1 / SMOOTH):
    return run_scheme(
        scheme,
        loss_low,
        loss_high,
        x_low,
        x_high,
        rounds=rounds,
        settings=SchemeSettings(lr_high=lr_high, lr_low=lr_low, q_max=Q_MAX),
    )


def test_the_task_is_what_the_tests_assume():
    assert float(quality(C_LOW)) == pytest.approx(0.5) and float(quality(C_HIGH)) == pytest.approx(0.875)
    assert best_quality(quality, C_HIGH, learning_rate=1 / SMOOTH) == pytest.approx(Q_MAX, abs=1e-6)


# a start below the Nash bargaining solution (Propositions 3 and 5): equal curvatures 1/16, the low firm far out
EQUAL = 1 / 16
X_LOW_FAR, X_HIGH_NEAR = jnp.array([1.0, 3.0]), jnp.array([0.0, 1.2])  # q = 0.3125 and 0.8475; q_max = 0.9375


def equal_loss_low(x):
    return EQUAL * jnp.sum((x - C_LOW) ** 2)


def equal_loss_high(x):
    return EQUAL * jnp.sum((x - C_HIGH) ** 2)


def run_below(lr_high, rounds=3000):
    return run_scheme(
        "defection-free",
        equal_loss_low,
        equal_loss_high,
        X_LOW_FAR,
        X_HIGH_NEAR,
        rounds=rounds,
        settings=SchemeSettings(lr_high=lr_high, lr_low=1 / (2 * EQUAL), q_max=0.9375),
    )


@pytest.mark.parametrize("lr_high", [1 / (2 * EQUAL), 0.5, 0.1, 0.02])  # 1 / L, then paced
def test_proposition_3_no_revenue_ever_decreases(lr_high):
    r = run_below(lr_high)
    assert r.q_low[0] < r.q_low_star
    assert np.diff(r.u_low).min() > -1e-6 and np.diff(r.u_high).min() > -1e-6  # float32 rounding only
    assert r.u_low[-1] > r.u_low[0]


def test_proposition_5_converges_to_the_nash_bargaining_solution():
    r = run_below(0.1)  # the high firm paced (Proposition 5); at alpha_h = 1 / L the low firm overshoots q_l*
    assert r.q_high_star == pytest.approx(0.9375)
    assert r.q_low[-1] == pytest.approx(r.q_low_star, abs=1e-3) and r.q_high[-1] == pytest.approx(0.9375, abs=1e-4)
    best = nash_objective(r.q_low_star, r.q_high_star, r.q_low[0], r.q_high[0])
    assert r.nash[-1] == pytest.approx(best, rel=1e-2)
    assert r.rho[-1] == pytest.approx(r.q_low_star / r.q_high_star, abs=2e-3)


def test_proposition_4_no_convergence_from_above_q_low_star():
    r = run("defection-free")  # the saturated start: q_l,0 = 0.5 above its q_l* = 0.476
    assert r.q_low[0] > r.q_low_star
    assert np.all(r.q_low == r.q_low[0])  # the low firm never updates (step 7)
    assert abs(r.q_low[-1] - r.q_low_star) > 1e-2 and r.q_high[-1] == pytest.approx(Q_MAX, abs=1e-4)


def test_complete_collaboration_ends_both_revenues():
    r = run("complete")
    assert abs(r.q_low[-1] - r.q_high[-1]) < 1e-4 and max(r.u_low[-1], r.u_high[-1]) < 1e-3  # Lemma 23: U -> 0


def test_one_sided_schemes():
    high = run("high-shares")  # the low firm learns from the high firm's data and overtakes it
    assert high.q_low[-1] > high.q_high[-1] and np.diff(high.u_high).min() < 0
    low = run("low-shares")  # only the high firm improves: both revenues grow (Proposition 1)
    assert low.q_high[-1] == pytest.approx(Q_MAX, abs=1e-4) and low.q_low[-1] == pytest.approx(0.5)
    assert np.diff(low.u_low).min() > -1e-6 and np.diff(low.u_high).min() > -1e-6


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(scheme="fedprox"), "scheme"),
        (dict(rounds=0), "rounds"),
        (dict(lr_high=0.0), "lr_high"),
        (dict(x_low=C_HIGH, x_high=C_LOW), "q_l < q_h"),
    ],
)
def test_bad_inputs(kwargs, word):
    args = dict(scheme="defection-free", x_low=C_LOW, x_high=C_HIGH, rounds=10, lr_high=1.0, lr_low=1.0)
    args.update(kwargs)
    scheme = args.pop("scheme")
    settings = SchemeSettings(lr_high=args.pop("lr_high"), lr_low=args.pop("lr_low"), q_max=Q_MAX)
    with pytest.raises(ValueError, match=word):
        run_scheme(scheme, loss_low, loss_high, args.pop("x_low"), args.pop("x_high"), settings=settings, **args)
    with pytest.raises(ValueError, match="q_max"):
        run_scheme(
            "defection-free",
            loss_low,
            loss_high,
            C_LOW,
            C_HIGH,
            rounds=5,
            settings=SchemeSettings(lr_high=1.0, lr_low=1.0),
        )


def test_monotone_keeps_a_step_that_would_lower_the_quality_out():
    """Assumption 4 enforced: with a quality that a gradient step lowers (here: the negated usual one), the
    high firm under Algorithm 5 keeps its model, and without ``monotone`` it takes the step."""

    def worse(x):  # improves as the losses grow: every descent step lowers it
        return 0.25 + 0.5 * (equal_loss_low(x) + equal_loss_high(x)) / 4

    kept = run_scheme(
        "defection-free",
        equal_loss_low,
        equal_loss_high,
        X_HIGH_NEAR,
        X_LOW_FAR,
        rounds=5,
        quality=worse,
        settings=SchemeSettings(lr_high=0.1, lr_low=0.1, q_max=0.99),
    )
    assert np.all(kept.q_high == kept.q_high[0])
    taken = run_scheme(
        "defection-free",
        equal_loss_low,
        equal_loss_high,
        X_HIGH_NEAR,
        X_LOW_FAR,
        rounds=5,
        quality=worse,
        settings=SchemeSettings(lr_high=0.1, lr_low=0.1, q_max=0.99, monotone=False),
    )
    assert taken.q_high[-1] < taken.q_high[0]


def test_data_are_an_argument():
    """``data=``: the losses and the quality take the data as an argument (the compiled rounds do not fold them)
    and give what the closures give."""
    data = {"c_low": C_LOW, "c_high": C_HIGH}
    with_data = run_scheme(
        "defection-free",
        lambda x, d: EQUAL * jnp.sum((x - d["c_low"]) ** 2),
        lambda x, d: EQUAL * jnp.sum((x - d["c_high"]) ** 2),
        X_LOW_FAR,
        X_HIGH_NEAR,
        rounds=50,
        data=data,
        settings=SchemeSettings(lr_high=0.1, lr_low=8.0, q_max=0.9375),
    )
    closed = run_scheme(
        "defection-free",
        equal_loss_low,
        equal_loss_high,
        X_LOW_FAR,
        X_HIGH_NEAR,
        rounds=50,
        settings=SchemeSettings(lr_high=0.1, lr_low=8.0, q_max=0.9375),
    )
    np.testing.assert_allclose(with_data.q_low, closed.q_low, rtol=1e-6)
    np.testing.assert_allclose(with_data.q_high, closed.q_high, rtol=1e-6)


def noisy_losses(scale):
    """Stochastic losses (a key-dependent perturbation of the quadratics' centres, as a minibatch would give) and
    the exact quality they estimate."""

    def loss(centre):
        def f(x, d, k):
            return EQUAL * jnp.sum((x - centre - scale * jax.random.normal(k, centre.shape)) ** 2)

        return f

    return loss(C_LOW), loss(C_HIGH)


def test_stochastic_steps_keep_proposition_3_and_depend_on_the_key():
    """``key``: the losses get a fresh key per step; under ``monotone`` Algorithm 5 still never lowers a revenue,
    and both qualities rise; another key gives another path; the quality must be given."""
    f_l, f_h = noisy_losses(0.3)
    args = dict(
        rounds=300,
        settings=SchemeSettings(lr_high=0.1, lr_low=2.0, q_max=0.9375),
        quality=lambda x, d: quality_equal(x),
    )

    def go(seed):
        return run_scheme(
            "defection-free", f_l, f_h, X_LOW_FAR, X_HIGH_NEAR, key=jax.random.PRNGKey(seed), data={}, **args
        )

    a, b = go(0), go(1)
    for r in (a, b):
        assert np.diff(r.u_low).min() > -1e-6 and np.diff(r.u_high).min() > -1e-6
        assert r.q_low[-1] > r.q_low[0] and r.q_high[-1] > r.q_high[0]
    assert not np.array_equal(a.q_high, b.q_high)
    with pytest.raises(ValueError, match="quality"):
        run_scheme(
            "complete",
            f_l,
            f_h,
            X_LOW_FAR,
            X_HIGH_NEAR,
            rounds=3,
            key=jax.random.PRNGKey(0),
            data={},
            settings=SchemeSettings(lr_high=0.1, lr_low=0.1),
        )


def quality_equal(x):
    return 1.0 - 0.5 * (equal_loss_low(x) + equal_loss_high(x))


def test_batched_runs_equal_the_runs_one_at_a_time():
    """``batched``: starting points and keys with a leading axis, vmapped into one program, give each run's
    single result (float32 rounding), and a Nash solution per run."""
    f_l, f_h = noisy_losses(0.2)
    starts_low = jnp.stack([X_LOW_FAR, X_LOW_FAR * 0.9, X_LOW_FAR * 1.1])
    starts_high = jnp.stack([X_HIGH_NEAR, X_HIGH_NEAR * 0.8, X_HIGH_NEAR])
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    args = dict(rounds=60, quality=lambda x, d: quality_equal(x), data={})
    steps = SchemeSettings(lr_high=0.1, lr_low=2.0)
    together = run_scheme(
        "defection-free",
        f_l,
        f_h,
        starts_low,
        starts_high,
        key=keys,
        batched=True,
        settings=dataclasses.replace(steps, q_max=np.array([0.9375, 0.93, 0.9375])),
        **args,
    )
    assert together.q_low.shape == (3, 61) and together.q_low_star.shape == (3,)
    for i, q_max in enumerate((0.9375, 0.93, 0.9375)):
        one = dataclasses.replace(steps, q_max=q_max)
        alone = run_scheme("defection-free", f_l, f_h, starts_low[i], starts_high[i], key=keys[i], settings=one, **args)
        assert together.q_low_star[i] == pytest.approx(alone.q_low_star)
        for name in ("q_low", "q_high", "u_low", "u_high", "rho"):
            np.testing.assert_allclose(getattr(together, name)[i], getattr(alone, name), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_experiment_script_writes_every_figure_and_the_claims(tmp_path, capsys):
    """The script end to end, in this process (its compiled programs shared by the three calls): the figures and
    claims, the refusal of a used folder and the one-line error of a firm that is not ahead."""
    import importlib.util
    import json
    import pathlib

    path = pathlib.Path(__file__).parent.parent / "experiments" / "defection_free.py"
    spec = importlib.util.spec_from_file_location("defection_free_script_run", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "df"
    argv = [
        "--rounds",
        "3",
        "--pretrain-epochs",
        "3",
        "--lr",
        "0.1",
        "--firm-size",
        "200",
        "--target-size",
        "200",
        "--seeds",
        "2",
        "--batch-size",
        "20",
        "--out",
        str(out),
    ]
    assert script.main(argv) == 0, capsys.readouterr().err
    result = json.loads((out / "defection_free.json").read_text())
    assert set(result["schemes"]) == {"complete", "high-shares", "low-shares", "defection-free"}
    # per seed (2) and round (the start and 3 rounds)
    assert all(np.asarray(v["q_low"]).shape == (2, 4) for v in result["schemes"].values())
    assert all(
        isinstance(c["holds"], bool) and c["seeds"] == 2 and c["holds"] == (c["seeds_holding"] == 2)
        for c in result["claims"]
    )
    assert result["seeds"] == [0, 1] and len(result["start"]["q_high"]) == 2
    # Proposition 3 on MNIST (LeNet-5, minibatch steps, accuracy as quality): no revenue falls at any round
    proposition_3 = [c for c in result["claims"] if "Proposition 3" in c["claim"]]
    assert len(proposition_3) == 1 and proposition_3[0]["holds"], proposition_3
    assert all((out / f"fig3_{i}.png").stat().st_size > 5000 for i in (1, 2, 3))
    capsys.readouterr()
    assert script.main(argv) == 2 and "--overwrite" in capsys.readouterr().err
    behind = argv[:3] + ["0"] + argv[4:-1] + [str(tmp_path / "behind")]  # no pre-training: "high" is not ahead
    assert script.main(behind) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "pre-train" in errors[0]


def test_docs_state_the_committed_claims():
    """docs/papers/thesis-incentives.md on which of §3.5's claims hold matches the two committed MNIST runs."""
    import json
    import pathlib

    root = pathlib.Path(__file__).parent.parent
    page = (root / "docs" / "papers" / "thesis-incentives.md").read_text()

    def committed(folder):
        return json.loads((root / "experiments" / "results" / folder / "defection_free.json").read_text())

    def figure(claim):
        return claim["claim"].split(":")[0]

    main = committed("defection_free")
    fails = [c for c in main["claims"] if not c["holds"]]
    assert [figure(c) for c in main["claims"] if c["holds"]] == ["Fig. 3.1", "Fig. 3.2a"] + ["Fig. 3.3"] * 3
    assert [figure(c) for c in fails] == ["Fig. 3.2b", "Fig. 3.3"] and fails[0]["seeds_holding"] == 0
    rho = fails[1]
    assert "rho" in rho["claim"] and f"on {rho['seeds_holding']} of the {rho['seeds']} seeds" in page
    assert min(row[-1] for row in main["schemes"]["low-shares"]["q_low"]) > 0.9  # "over 90% target accuracy"
    assert "Fig. 3.2b\ndoes **not** hold there" in page

    thesis = committed("defection_free_thesis_lr")
    holding = [c for c in thesis["claims"] if c["holds"]]
    assert [figure(c) for c in holding] == ["Fig. 3.2a", "Fig. 3.2b", "Fig. 3.3", "Fig. 3.3"]
    assert "Proposition 3" in holding[2]["claim"] and "qualities" in holding[3]["claim"]
    assert round(10 * np.mean(thesis["start"]["q_high"])) == 4  # "about 40% target accuracy"
    assert thesis["settings"]["lr"] == 0.01 and thesis["settings"]["rounds"] == 100


def test_the_thesis_split_from_tfds_mnist_mock_data():
    """``--dataset mnist``: the firms from MNIST's training split with F(5) = 0.8 / 0.2, the target the whole test
    split (tensorflow-datasets' mock data: no download)."""
    import importlib.util
    import pathlib

    tfds = pytest.importorskip("tensorflow_datasets")
    path = pathlib.Path(__file__).parent.parent / "experiments" / "defection_free.py"
    spec = importlib.util.spec_from_file_location("defection_free_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with tfds.testing.mock_data(num_examples=400):
        low, high, target = script.load_firm_data("mnist", None, 50, seed=0)
    assert low["x"].shape == (50, 28, 28, 1) and high["x"].shape == (50, 28, 28, 1)
    assert int(jnp.sum(low["y"] <= 5)) == 40 and int(jnp.sum(high["y"] <= 5)) == 10
    assert target["y"].shape == (400,)  # the test split, shuffled
    with pytest.raises(ValueError, match="--dataset"):
        script.load_firm_data("cifar10", None, 50, seed=0)
    with pytest.raises(ValueError, match="fewer than 500 target images"):
        script.load_firm_data("mnist-5k", None, 2400, seed=0)
