"""Werner's thesis, ch. 4: the price-discrimination game (Fig. 4.1) and its repeated protocol (Figs. 4.2-4.5).

    python experiments/price_discrimination.py --out experiments/results/price_discrimination

Fig. 4.1: the seller's and the theta_bar-buyer's equilibrium utilities (Theorem 6, Corollary 2) against alpha in
both regimes (theta_low >= mu theta_bar with mu = 0.3, and the thesis's theta_low < mu theta_bar with mu = 0.5).
Figs. 4.2-4.4: Algorithm 6 with the §4.4 parameters (mu = 0.5, theta_low = 5, theta_bar = 15, c_B = c_S = 5,
n = 10) for the Exp3-IX, CExp3 and alpha*-PD sellers against CBER buyers: cumulative average utilities against
the (alpha = 0 / 1 / alpha*)-equilibrium utilities, alpha_hat_t against the true running mean alpha_bar_t, the
relative frequencies of the seller's four actions. Fig. 4.5: the seller's cumulative average utility after
``--bias-rounds`` rounds when the buyers act on clip(alpha_hat + eps, 0, 1), eps ~ Unif(gamma_i), gamma_i the 20
intervals of width 0.1 of [-1, 1]. Every (seller, seed, bias) run of a figure is one vmapped program
(:func:`fedjax_clust.incentives.pd_repeated.run_protocol`); curves are the mean over seeds with the min-max band.

Writes ``price_discrimination.json`` (every curve, downsampled, and the claims checked), ``summary.md`` (the
claims and whether they hold in this run) and ``fig4_1.png`` .. ``fig4_5.png``.
"""

from __future__ import annotations

import os
import re
import sys
import time

import numpy as np

from fedjax_clust import __version__
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args, experiment_settings
from fedjax_clust.core.validation import check_int
from fedjax_clust.incentives.pd_game import alpha_star, equilibrium_utilities, pd_game
from fedjax_clust.incentives.pd_repeated import ACTIONS, BIAS_INTERVALS, SELLERS, exp3_ix_parameters, run_protocol
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance

OUTPUTS = ("price_discrimination.json", "summary.md", "config.toml") + tuple(f"fig4_{i}.png" for i in range(1, 6))
LABELS = {"exp3": "Exp3 (signal blind)", "cexp3": "CExp3 (signal aware)", "stackelberg": "alpha*-PD (Stackelberg)"}


def _points(rounds: int, count: int = 200) -> np.ndarray:
    return np.unique(np.linspace(0, rounds - 1, min(count, rounds)).astype(int))


def _band(values: np.ndarray, at: np.ndarray) -> dict:
    """Mean and min / max over seeds (rows) at the rounds ``at``."""
    v = values[:, at]
    return {"round": (at + 1).tolist(), "mean": v.mean(0).tolist(), "min": v.min(0).tolist(), "max": v.max(0).tolist()}


def fig4_1(path):
    """Equilibrium utilities against alpha in both regimes (Theorem 6 / Corollary 2)."""
    regimes = {
        "theta_low >= mu theta_bar (mu = 0.3)": pd_game(mu=0.3),
        "theta_low < mu theta_bar (mu = 0.5)": pd_game(mu=0.5),
    }
    alphas = np.linspace(0.0, 1.0, 201)
    fig, axes = figure_for_file(1, 2, figsize=(11, 4))
    out = {}
    for ax, (title, game) in zip(axes, regimes.items()):
        rows = [equilibrium_utilities(game, float(a)) for a in alphas]
        out[title] = {
            "alpha": alphas.tolist(),
            "seller": [r["seller"] for r in rows],
            "buyer_bar": [r["buyer_bar"] for r in rows],
            "alpha_star": alpha_star(game),
        }
        ax.plot(alphas, out[title]["seller"], label="seller (per buyer)")
        ax.plot(alphas, out[title]["buyer_bar"], label="theta_bar-buyer")
        ax.axvline(alpha_star(game), color="grey", ls=":", label="alpha* = c_B / Delta")
        ax.set_title(title)
        ax.set_xlabel("alpha (probability the seller is signal aware)")
        ax.set_ylabel("equilibrium utility")
        ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return out


def _running_mean(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=-1) / np.arange(1, x.shape[-1] + 1)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/price_discrimination")
    parser.add_argument("--rounds", type=int, default=20000, help="rounds of Figs. 4.2-4.4 (default 20,000)")
    parser.add_argument("--bias-rounds", type=int, default=20000, help="rounds of Fig. 4.5 (default 20,000)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per seller (and bias interval)")
    game_options = parser.add_argument_group("the game of Figs. 4.2-4.5 (defaults: the thesis's §4.4)")
    game_options.add_argument(
        "--mu", type=float, default=0.5, help="share of theta_bar-buyers, in (0, 1) (default 0.5)"
    )
    game_options.add_argument("--theta-low", type=float, default=5.0, help="the low valuation (default 5)")
    game_options.add_argument("--theta-bar", type=float, default=15.0, help="the high valuation (default 15)")
    game_options.add_argument(
        "--c-buyer", type=float, default=5.0, help="a buyer's cost of evading, below theta_bar - theta_low (default 5)"
    )
    game_options.add_argument("--c-seller", type=float, default=5.0, help="the seller's cost per evasion (default 5)")
    game_options.add_argument("--buyers", type=int, default=10, help="buyers per round n (default 10)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run's results in --out")
    args = experiment_args(parser, argv, "price_discrimination.py")
    try:  # bad options: one line, exit status 2, nothing written
        for flag, value in (
            ("--rounds", args.rounds),
            ("--bias-rounds", args.bias_rounds),
            ("--seeds", args.seeds),
            ("--buyers", args.buyers),
        ):
            check_int(flag, value)
        game = pd_game(
            mu=args.mu,
            theta_low=args.theta_low,
            theta_bar=args.theta_bar,
            c_buyer=args.c_buyer,
            c_seller=args.c_seller,
            n=args.buyers,
        )
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        message = str(error)
        for name in ("mu", "theta_low", "theta_bar", "c_buyer", "c_seller"):  # name the flag the user typed
            message = re.sub(rf"\b{name}\b", "--" + name.replace("_", "-"), message)
        print(f"error: {message}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    eq = {
        name: equilibrium_utilities(game, a)
        for name, a in (("alpha=0", 0.0), ("alpha=1", 1.0), ("alpha=alpha*", alpha_star(game)))
    }
    results = {
        "settings": experiment_settings(args),
        "version": __version__,
        "provenance": provenance(),
        "game": game._asdict(),
        "alpha_star": alpha_star(game),
        "equilibria": eq,
        "exp3_ix": dict(zip(("eta", "gamma"), exp3_ix_parameters(args.rounds))),
        "fig4_1": fig4_1(os.path.join(args.out, "fig4_1.png")),
    }

    runs = [(seller, seed, (0.0, 0.0)) for seller in SELLERS for seed in range(args.seeds)]
    r = run_protocol(game, runs, rounds=args.rounds)
    at = _points(args.rounds)
    by = {s: [i for i, run in enumerate(runs) if run[0] == s] for s in SELLERS}
    curves, actions, finals = {}, {}, {}
    fig2, axes2 = figure_for_file(1, 2, figsize=(11, 4))
    fig3, ax3 = figure_for_file(figsize=(6.4, 4.4))
    for seller in SELLERS:
        idx = by[seller]
        seller_avg = _running_mean(r.seller_utility[idx])
        buyer_avg = np.cumsum(r.buyer_bar_sum[idx], -1) / np.maximum(np.cumsum(r.buyer_bar_count[idx], -1), 1)
        alpha_bar = _running_mean(r.alpha[idx])
        curves[seller] = {
            "seller_utility": _band(seller_avg, at),
            "buyer_bar_utility": _band(buyer_avg, at),
            "alpha_hat": _band(r.alpha_hat[idx], at),
            "alpha_bar": _band(alpha_bar, at),
        }
        actions[seller] = {a: float(np.mean(r.action[idx] == k)) for k, a in enumerate(ACTIONS)}
        last = slice(args.rounds - max(1, args.rounds // 10), args.rounds)  # the last tenth of the rounds
        finals[seller] = {
            "seller_utility_last_tenth": r.seller_utility[idx][:, last].mean(1).tolist(),
            "alpha_hat_final": r.alpha_hat[idx][:, -1].tolist(),
            "alpha_bar_final": alpha_bar[:, -1].tolist(),
        }
        rounds_axis = at + 1
        axes2[0].plot(rounds_axis, seller_avg[:, at].mean(0), label=LABELS[seller])
        axes2[0].fill_between(rounds_axis, seller_avg[:, at].min(0), seller_avg[:, at].max(0), alpha=0.2)
        axes2[1].plot(rounds_axis, buyer_avg[:, at].mean(0), label=LABELS[seller])
        (line,) = ax3.plot(rounds_axis, r.alpha_hat[idx][:, at].mean(0), label=f"alpha_hat, {LABELS[seller]}")
        ax3.plot(rounds_axis, alpha_bar[:, at].mean(0), ls="--", color=line.get_color(), label=f"alpha_bar, {seller}")
    for ax, key, title in (
        (axes2[0], "seller", "seller utility per buyer"),
        (axes2[1], "buyer_bar", "theta_bar-buyer utility"),
    ):
        for name, style in (("alpha=0", ":"), ("alpha=1", "-."), ("alpha=alpha*", "--")):
            ax.axhline(eq[name][key], color="grey", ls=style, lw=1, label=f"({name})-PD equilibrium")
        ax.set_xscale("log")
        ax.set_xlabel("round")
        ax.set_title(f"cumulative average {title}")
        ax.legend(fontsize=7)
    fig2.savefig(os.path.join(args.out, "fig4_2.png"), dpi=120, bbox_inches="tight")
    ax3.set_xscale("log")
    ax3.set_xlabel("round")
    ax3.set_ylabel("probability of price discrimination")
    ax3.legend(fontsize=7)
    fig3.savefig(os.path.join(args.out, "fig4_3.png"), dpi=120, bbox_inches="tight")
    fig4, ax4 = figure_for_file(figsize=(7, 4))
    width = 0.25
    for j, seller in enumerate(SELLERS):
        ax4.bar(np.arange(4) + (j - 1) * width, [actions[seller][a] for a in ACTIONS], width, label=LABELS[seller])
    ax4.set_xticks(np.arange(4), ["high to all", "low to all", "PD", "reverse PD"])
    ax4.set_ylabel("relative frequency")
    ax4.legend()
    fig4.savefig(os.path.join(args.out, "fig4_4.png"), dpi=120, bbox_inches="tight")

    bias_runs = [(seller, seed, bias) for seller in SELLERS for bias in BIAS_INTERVALS for seed in range(args.seeds)]
    b = run_protocol(game, bias_runs, rounds=args.bias_rounds)
    average = b.seller_utility.mean(1)
    bias_table = {}
    fig5, ax5 = figure_for_file(figsize=(7, 4))
    centres = [0.5 * (lo + hi) for lo, hi in BIAS_INTERVALS]
    for seller in SELLERS:
        rows = []
        for lo, hi in BIAS_INTERVALS:
            idx = [i for i, run in enumerate(bias_runs) if run[0] == seller and run[2] == (lo, hi)]
            rows.append(
                {
                    "bias": [lo, hi],
                    "mean": float(average[idx].mean()),
                    "min": float(average[idx].min()),
                    "max": float(average[idx].max()),
                }
            )
        bias_table[seller] = rows
        ax5.errorbar(
            centres,
            [x["mean"] for x in rows],
            yerr=[[x["mean"] - x["min"] for x in rows], [x["max"] - x["mean"] for x in rows]],
            marker="o",
            capsize=2,
            label=LABELS[seller],
        )
    ax5.set_xlabel("bias interval centre (buyers act on alpha_hat + eps)")
    ax5.set_ylabel(f"seller's average utility per buyer, {args.bias_rounds} rounds")
    ax5.legend()
    fig5.savefig(os.path.join(args.out, "fig4_5.png"), dpi=120, bbox_inches="tight")

    claims = check_claims(game, eq, finals, actions, bias_table)
    results.update(
        fig4_2_4_3=curves,
        fig4_4=actions,
        finals=finals,
        fig4_5=bias_table,
        claims=claims,
        seconds=time.perf_counter() - start,
    )
    write_json(os.path.join(args.out, "price_discrimination.json"), results)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary_markdown(args, claims))
    print(f"wrote {args.out}/price_discrimination.json, summary.md and fig4_1..5.png in {results['seconds']:.0f} s")
    return 0


def check_claims(game, eq, finals, actions, bias_table) -> list:
    """The chapter's claims about Figs. 4.2-4.5, each with what this run measured and whether it holds."""
    a_star = alpha_star(game)
    mean = lambda xs: float(np.mean(xs))  # noqa: E731

    def claim(text, measured, holds):
        return {"claim": text, "measured": measured, "holds": bool(holds)}

    exp3, cexp3, stack = finals["exp3"], finals["cexp3"], finals["stackelberg"]
    unbiased = [row for row in bias_table["cexp3"] if row["bias"][1] <= 0.0]
    return [
        claim(
            "Exp3: the seller's utility converges to the (alpha = 0)-PD equilibrium utility",
            {"last_tenth": mean(exp3["seller_utility_last_tenth"]), "equilibrium": eq["alpha=0"]["seller"]},
            abs(mean(exp3["seller_utility_last_tenth"]) - eq["alpha=0"]["seller"]) < 0.5,
        ),
        claim(
            "Exp3: alpha_hat -> 0", {"alpha_hat": mean(exp3["alpha_hat_final"])}, mean(exp3["alpha_hat_final"]) < 0.02
        ),
        claim(
            "CExp3: the seller's utility converges to the (alpha = 1)-PD equilibrium utility",
            {"last_tenth": mean(cexp3["seller_utility_last_tenth"]), "equilibrium": eq["alpha=1"]["seller"]},
            abs(mean(cexp3["seller_utility_last_tenth"]) - eq["alpha=1"]["seller"]) < 0.5,
        ),
        claim(
            f"CExp3: alpha_hat ends above alpha* ({a_star:g})",
            {"alpha_hat": cexp3["alpha_hat_final"]},
            min(cexp3["alpha_hat_final"]) > a_star,
        ),
        claim(
            "alpha*-PD: alpha_hat -> alpha*",
            {"alpha_hat": stack["alpha_hat_final"]},
            max(abs(a - a_star) for a in stack["alpha_hat_final"]) < 0.03,
        ),
        claim(
            "alpha*-PD: the seller's utility converges to the (alpha = alpha*)-PD equilibrium utility",
            {"last_tenth_per_seed": stack["seller_utility_last_tenth"], "equilibrium": eq["alpha=alpha*"]["seller"]},
            all(abs(u - eq["alpha=alpha*"]["seller"]) < 0.5 for u in stack["seller_utility_last_tenth"]),
        ),
        claim(
            "alpha_hat tracks alpha_bar (consistency, Lemma 26) for every seller",
            {
                s: float(np.max(np.abs(np.subtract(finals[s]["alpha_hat_final"], finals[s]["alpha_bar_final"]))))
                for s in SELLERS
            },
            all(
                np.max(np.abs(np.subtract(finals[s]["alpha_hat_final"], finals[s]["alpha_bar_final"]))) < 0.05
                for s in SELLERS
            ),
        ),
        claim(
            "Exp3 never price-discriminates (PD and reverse-PD frequencies 0)",
            {"pd": actions["exp3"]["pd"], "reverse-pd": actions["exp3"]["reverse-pd"]},
            actions["exp3"]["pd"] == 0 and actions["exp3"]["reverse-pd"] == 0,
        ),
        claim(
            "Fig. 4.5: overestimating buyers (bias > 0) hurt every seller",
            {s: [bias_table[s][9]["mean"], bias_table[s][-1]["mean"]] for s in SELLERS},
            all(bias_table[s][-1]["mean"] < bias_table[s][9]["mean"] for s in SELLERS),
        ),
        claim(
            "Fig. 4.5: CExp3 gains from underestimating buyers (bias < 0) over consistent ones",
            {"most_negative": bias_table["cexp3"][0]["mean"], "around_zero": bias_table["cexp3"][9]["mean"]},
            bool(unbiased) and bias_table["cexp3"][0]["mean"] > bias_table["cexp3"][9]["mean"],
        ),
    ]


def summary_markdown(args, claims) -> str:
    lines = [
        "# Price discrimination (thesis ch. 4): the claims in this run",
        "",
        f"`python experiments/price_discrimination.py --config config.toml` ({args.rounds} rounds, "
        f"{args.bias_rounds} for Fig. 4.5, {args.seeds} seeds, the game mu = {args.mu:g}, theta_low = "
        f"{args.theta_low:g}, theta_bar = {args.theta_bar:g}, c_B = {args.c_buyer:g}, c_S = {args.c_seller:g}, "
        f"n = {args.buyers}), fedjax-clust {__version__}.",
        "",
        "| claim | holds | measured |",
        "| --- | --- | --- |",
    ]
    for c in claims:
        measured = str(c["measured"]).replace("|", "/")
        lines.append(f"| {c['claim']} | {'yes' if c['holds'] else '**no**'} | {measured} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
