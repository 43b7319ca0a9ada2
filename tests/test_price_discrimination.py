"""The price-discrimination game (thesis ch. 4): Theorem 6's equilibrium against brute-force best responses and a
Monte Carlo of the game, Corollary 2's orderings in both regimes, and the repeated protocol (Algorithm 6)."""

import numpy as np
import pytest
from conftest import run_experiment

from fedjax_clust.incentives.pd_game import alpha_star, equilibrium, equilibrium_utilities, pd_game, q_star
from fedjax_clust.incentives.pd_repeated import run_protocol

REGIMES = {"low >= mu bar": dict(mu=0.3), "low < mu bar": dict(mu=0.5)}  # theta 5 / 15, c_B = c_S = 5


def seller_price_for_low_signal(game, q):
    """The signal-aware seller's best response to s_low when theta_bar-buyers evade with probability q: the
    price maximising expected revenue over a fine grid, under the Bayes posterior (ties: the lower price)."""
    posterior = game.mu * q / (game.mu * q + 1 - game.mu)
    grid = np.linspace(0.0, game.theta_bar + 1.0, 3201)
    revenue = grid * (posterior * (grid <= game.theta_bar) + (1 - posterior) * (grid <= game.theta_low))
    return grid[np.flatnonzero(revenue >= revenue.max() - 1e-9)[0]]


def buyer_utility(game, alpha, q):
    """A theta_bar-buyer's expected utility when it evades with probability q and the sellers best-respond."""
    blind = equilibrium(game, alpha).price_blind
    p_low = seller_price_for_low_signal(game, q)
    gain_if_evading = game.theta_bar - p_low if p_low <= game.theta_bar else 0.0
    return (1 - alpha) * (game.theta_bar - blind) + alpha * q * gain_if_evading - q * game.c_buyer


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 0.51, 0.8, 1.0])
def test_theorem_6_strategies_are_best_responses(regime, alpha):
    game = pd_game(**REGIMES[regime])
    eq = equilibrium(game, alpha)
    # the blind seller's price maximises mu p 1(p <= bar) + (1 - mu) p 1(p <= low) over a price grid
    grid = np.linspace(0.0, game.theta_bar + 1.0, 3201)
    revenue = grid * (game.mu * (grid <= game.theta_bar) + (1 - game.mu) * (grid <= game.theta_low))
    assert eq.price_blind == pytest.approx(grid[np.argmax(revenue)])
    # the signal-aware prices best-respond to the equilibrium evasion
    assert eq.price_low == pytest.approx(seller_price_for_low_signal(game, eq.evasion))
    assert eq.price_bar == game.theta_bar
    # the evasion probability is the buyer's best response, anticipating the seller's
    qs = np.unique(np.append(np.linspace(0.0, 1.0, 2001), eq.evasion))
    utilities = np.array([buyer_utility(game, alpha, q) for q in qs])
    assert buyer_utility(game, alpha, eq.evasion) >= utilities.max() - 1e-9
    assert equilibrium_utilities(game, alpha)["buyer_bar"] == pytest.approx(buyer_utility(game, alpha, eq.evasion))


@pytest.mark.parametrize("regime", REGIMES)
def test_utilities_match_a_monte_carlo_of_the_game(regime):
    game = pd_game(**REGIMES[regime])
    rng = np.random.default_rng(0)
    draws = 400_000
    for alpha in (0.0, alpha_star(game), 1.0):
        eq = equilibrium(game, alpha)
        high = rng.random(draws) < game.mu
        evades = high & (rng.random(draws) < eq.evasion)
        aware = rng.random(draws) < alpha
        price = np.where(aware, np.where(high & ~evades, eq.price_bar, eq.price_low), eq.price_blind)
        value = np.where(high, game.theta_bar, game.theta_low)
        buys = value >= price
        seller = np.mean(price * buys - game.c_seller * evades)
        buyer = np.mean(((value - price) * buys - game.c_buyer * evades)[high])
        want = equilibrium_utilities(game, alpha)
        assert seller == pytest.approx(want["seller"], abs=0.05)
        assert buyer == pytest.approx(want["buyer_bar"], abs=0.05)


def test_corollary_2_orderings_in_both_regimes():
    a = pd_game(mu=0.3)  # theta_low >= mu theta_bar
    u = {x: equilibrium_utilities(a, x) for x in (0.0, alpha_star(a), 1.0)}
    s, b = ({k: v[key] for k, v in u.items()} for key in ("seller", "buyer_bar"))
    assert s[alpha_star(a)] > s[0.0] > s[1.0]
    assert b[0.0] > b[1.0] == pytest.approx(b[alpha_star(a)])
    c = pd_game(mu=0.5)  # theta_low < mu theta_bar: the thesis's experiments
    u = {x: equilibrium_utilities(c, x) for x in (0.0, alpha_star(c), 1.0)}
    s, b = ({k: v[key] for k, v in u.items()} for key in ("seller", "buyer_bar"))
    assert s[alpha_star(c)] > s[0.0] > s[1.0]
    assert b[1.0] > b[0.0] == pytest.approx(b[alpha_star(c)])
    # alpha* maximises the seller's utility over a grid of alpha
    for game in (a, c):
        grid = np.linspace(0, 1, 1001)
        best = grid[np.argmax([equilibrium_utilities(game, x)["seller"] for x in grid])]
        assert best == pytest.approx(alpha_star(game), abs=1e-3)
    assert q_star(c) == pytest.approx(0.5) and q_star(a) == 1.0


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(c_buyer=10.0), "c_buyer"),
        (dict(mu=0.0), "mu"),
        (dict(mu=1.0), "mu"),
        (dict(theta_low=15.0), "theta_bar"),
        (dict(n=0), "n"),
        (dict(mu=float("nan")), "mu"),
    ],
)
def test_bad_games_are_value_errors(kwargs, word):
    with pytest.raises(ValueError, match=word):
        pd_game(**kwargs)


def test_repeated_protocol_claims_at_small_size():
    game = pd_game()
    runs = [(seller, seed, (0.0, 0.0)) for seller in ("exp3", "cexp3", "stackelberg") for seed in range(3)]
    r = run_protocol(game, runs, rounds=4000)
    exp3, cexp3, stack = slice(0, 3), slice(3, 6), slice(6, 9)
    assert np.all(r.alpha_hat[exp3, -1] == 0.0) and np.all(r.alpha[exp3] == 0.0)  # Exp3 never discriminates
    assert np.all(np.isin(r.action[exp3], (0, 1)))
    assert abs(r.seller_utility[exp3, -1000:].mean() - equilibrium_utilities(game, 0.0)["seller"]) < 0.4
    assert np.all(np.abs(r.alpha_hat[stack, -1] - 0.5) < 0.05)  # alpha*-PD: alpha_hat -> alpha*
    assert np.all(r.alpha_hat[cexp3, -1] > 0.5)
    # consistency: alpha_hat_t tracks the running mean of the seller's true alpha_t (Lemma 26)
    alpha_bar = np.cumsum(r.alpha, axis=1) / np.arange(1, r.alpha.shape[1] + 1)
    assert np.all(np.abs(r.alpha_hat[:, -1] - alpha_bar[:, -1]) < 0.05)


def test_a_run_is_the_same_alone_or_in_a_batch():
    game = pd_game()
    alone = run_protocol(game, [("cexp3", 4, (-0.2, -0.1))], rounds=300)
    batch = run_protocol(game, [("exp3", 1, (0.0, 0.0)), ("cexp3", 4, (-0.2, -0.1))], rounds=300)
    np.testing.assert_array_equal(alone.action[0], batch.action[1])  # the same draws and decisions
    for a, b in zip(alone, batch):  # float sums may differ in the last bit between batch shapes
        np.testing.assert_allclose(a[0], b[1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "runs, rounds, word",
    [
        ([("ucb", 0, (0.0, 0.0))], 10, "seller"),
        ([("exp3", 0, (0.5, 0.1))], 10, "bias"),
        ([("exp3", 0, (0.0, 0.0))], 0, "rounds"),
        ([], 10, "runs"),
        ([("exp3", -1, (0.0, 0.0))], 10, "seed"),
    ],
)
def test_bad_protocol_inputs(runs, rounds, word):
    with pytest.raises(ValueError, match=word):
        run_protocol(pd_game(), runs, rounds=rounds)


@pytest.mark.slow
def test_experiment_script_writes_every_figure_and_the_claims(tmp_path, capsys):
    out = tmp_path / "pd"
    status = run_experiment(
        "price_discrimination.py", ["--rounds", "600", "--bias-rounds", "200", "--seeds", "2", "--out", str(out)]
    )
    assert status == 0, capsys.readouterr().err
    import json

    result = json.loads((out / "price_discrimination.json").read_text())
    assert {c["claim"] for c in result["claims"]} and all(isinstance(c["holds"], bool) for c in result["claims"])
    assert len(result["fig4_5"]["cexp3"]) == 20
    assert all((out / f"fig4_{i}.png").stat().st_size > 5000 for i in range(1, 6))
    capsys.readouterr()
    assert run_experiment("price_discrimination.py", ["--rounds", "600", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err


def _script():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parent.parent / "experiments" / "price_discrimination.py"
    spec = importlib.util.spec_from_file_location("price_discrimination_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--c-buyer", "12"], "--c-buyer must be below --theta-bar - --theta-low = 10.0"),
        (["--mu", "1"], "--mu must be < 1.0"),
        (["--mu", "0"], "--mu must be > 0.0"),
        (["--theta-low", "20"], "--theta-bar must exceed --theta-low"),
        (["--buyers", "0"], "--buyers must be an integer >= 1"),
        (["--rounds", "0"], "--rounds must be an integer"),
        (["--c-seller", "-1"], "--c-seller must be"),
    ],
)
def test_script_refuses_bad_games_in_one_line(tmp_path, capsys, flags, message):
    assert _script().main(flags + ["--out", str(tmp_path / "pd")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "pd").exists()


def test_script_runs_another_game(tmp_path):
    """The game options reach the protocol: with c_B = 2 (alpha* = 0.2) the alpha*-PD seller's alpha_hat ends
    near 0.2, and the JSON records the game."""
    import json

    out = tmp_path / "pd"
    assert (
        _script().main(["--c-buyer", "2", "--rounds", "3000", "--bias-rounds", "10", "--seeds", "2", "--out", str(out)])
        == 0
    )
    result = json.loads((out / "price_discrimination.json").read_text())
    assert result["game"]["c_buyer"] == 2.0 and result["alpha_star"] == pytest.approx(0.2)
    assert all(abs(a - 0.2) < 0.05 for a in result["finals"]["stackelberg"]["alpha_hat_final"])


def test_docs_example_runs():
    import pathlib

    page = (pathlib.Path(__file__).parent.parent / "docs" / "papers" / "thesis-incentives.md").read_text()
    section = page[page.index("## Incentives: the duopoly and the price-discrimination game") :]
    scope = {}
    exec(compile(section.split("```python\n", 1)[1].split("```", 1)[0], "docs: incentives", "exec"), scope)
    assert abs(scope["result"].alpha_hat[0, -1]) < 0.02 and abs(scope["result"].alpha_hat[1, -1] - 0.5) < 0.05


def test_docs_state_the_committed_claims():
    """docs/papers/thesis-incentives.md on which claims hold matches the committed run's claims."""
    import json
    import pathlib

    root = pathlib.Path(__file__).parent.parent
    committed = root / "experiments" / "results" / "price_discrimination" / "price_discrimination.json"
    claims = {c["claim"]: c["holds"] for c in json.loads(committed.read_text())["claims"]}
    stated_false = "alpha*-PD: the seller's utility converges to the (alpha = alpha*)-PD equilibrium utility"
    assert claims.pop(stated_false) is False
    assert all(claims.values()), [k for k, v in claims.items() if not v]
    page = (root / "docs" / "papers" / "thesis-incentives.md").read_text()
    assert "**not** confirm that the α*-PD seller's utility converges" in page


def test_python_loop_driver_equals_the_compiled_scan_and_the_program_is_cached():
    """The benchmark's reference (a Python loop over the same jitted round) gives the compiled program's outputs
    exactly; run_protocol reuses its compiled program for the same game and horizon."""
    from fedjax_clust.bench.games import grid_runs, loop_protocol
    from fedjax_clust.incentives.pd_repeated import BIAS_INTERVALS, protocol_program

    game = pd_game()
    runs = [("exp3", 0, (0.0, 0.0)), ("cexp3", 1, (-0.3, -0.2)), ("stackelberg", 2, BIAS_INTERVALS[15])]
    scanned = run_protocol(game, runs, rounds=40)
    looped = loop_protocol(game, runs, rounds=40)
    for a, b in zip(scanned, looped):
        np.testing.assert_array_equal(a, np.asarray(b))
    assert protocol_program(game, 40) is protocol_program(pd_game(), 40)
    assert len(grid_runs(2)) == 3 * 20 * 2 and len(BIAS_INTERVALS) == 20
    assert BIAS_INTERVALS[0] == (-1.0, -0.9) and BIAS_INTERVALS[-1] == (0.9, 1.0)


def test_pd_protocol_benchmark_rows(capsys):
    """``bench --model pd-protocol`` at tiny sizes: the loop row, the compiled row at the loop's size (the ratio,
    and outputs equal to the loop's) and the compiled row at --rounds; flags of other models are refused."""
    import json

    from fedjax_clust.cli.commands import main

    assert (
        main(
            [
                "bench",
                "--model",
                "pd-protocol",
                "--seeds",
                "1",
                "--rounds",
                "30",
                "--loop-rounds",
                "10",
                "--repeats",
                "1",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["driver"], r["rounds"]) for r in rows] == [
        ("python-loop", 10),
        ("compiled-scan", 10),
        ("compiled-scan", 30),
    ]
    assert all(r["runs"] == 60 and r["seconds"] > 0 and r["run_rounds_per_s"] > 0 for r in rows)
    assert rows[1]["max_abs_difference_vs_loop"] == 0.0
    assert rows[1]["speedup_vs_loop"] == round(rows[0]["seconds"] / rows[1]["seconds"], 1)
    assert rows[0]["round_flops"] > 0 and rows[0]["matmul_gflops"] > 0
    assert main(["bench", "--model", "pd-protocol", "--clients", "4"]) == 2
    assert main(["bench", "--model", "linear", "--seeds", "2"]) == 2
    assert main(["bench", "--model", "pd-protocol", "--loop-rounds", "0"]) == 2


def test_docs_benchmark_numbers_are_the_committed_ones():
    """The docs page's Fig. 4.5 grid time and loop ratio are those of experiments/results/bench/pd_protocol.jsonl."""
    import json
    import pathlib

    root = pathlib.Path(__file__).parent.parent
    loop, small, full = (
        json.loads(line)
        for line in (root / "experiments" / "results" / "bench" / "pd_protocol.jsonl").read_text().splitlines()
    )
    assert (loop["driver"], small["driver"], full["driver"]) == ("python-loop", "compiled-scan", "compiled-scan")
    assert full["runs"] == 600 and full["rounds"] == 20000 and full["seconds"] < 60
    page = (root / "docs" / "papers" / "thesis-incentives.md").read_text()
    assert f"one compiled program in {full['seconds']:.1f} s" in page  # (a generated block: docs/tables.py)
    assert f"{small['speedup_vs_loop']:g}× faster than a" in page
