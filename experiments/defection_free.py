"""Werner's thesis, ch. 3, §3.5: two competing firms on MNIST under the collaboration schemes (Figs. 3.1-3.3).

    python experiments/defection_free.py --out experiments/results/defection_free

Two firms with 1,000 training images each: the low-quality firm's labels have empirical CDF F(5) = 0.8 (80% of
its images are digits 0-5), the high-quality firm's F(5) = 0.2; the target distribution is drawn from the other
images of the offline MNIST subset (mnist-5k), the same number of every digit (250 each with the default sizes;
``--target-size`` of them are used, the thesis uses the MNIST test set). LeNet-5, cross-entropy,
full-batch gradient steps with learning rate 0.01 (``--lr``); the high-quality firm is pre-trained for 10 epochs
on its own images (``--pretrain-epochs``), the low-quality firm starts from its initialisation.

Choices the thesis leaves open: a model's quality q is its accuracy on the target images (the thesis's
q = 1 - f needs a loss in [0, 1]; the firms still train on the mean of their two cross-entropies, the objective
(3.1)); a pre-training epoch is one pass of minibatches of 50 of the firm's own images; the best attainable
quality q_max of the Nash bargaining solution (Proposition 2) is the best target accuracy Complete Collaboration
reaches in the same number of rounds; the low firm's inner loop takes trial steps of ``--lr-low`` (halved on
overshooting q_hat, at most ``--max-inner`` per round).

Writes ``defection_free.json`` (per scheme and round: both qualities, both revenues, rho_t, the Nash objective),
``summary.md`` (the chapter's claims about Figs. 3.1-3.3 and whether they hold) and ``fig3_1.png``,
``fig3_2.png`` (both one-sided schemes), ``fig3_3.png``.
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_clust import __version__
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args, experiment_settings
from fedjax_clust.core.validation import check_int, check_real
from fedjax_clust.data.sources import load_mnist_5k
from fedjax_clust.incentives.defection_free import SCHEMES, run_scheme
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.models.zoo import make_model

OUTPUTS = ("defection_free.json", "summary.md", "config.toml", "fig3_1.png", "fig3_2.png", "fig3_3.png")


def firm_datasets(images, labels, size: int, seed: int):
    """(low, high, target) image sets: ``size`` images each for the firms, 80% / 20% of them digits 0-5, and
    the remaining images as the target."""
    rng = np.random.default_rng(seed)
    small = rng.permutation(np.flatnonzero(labels <= 5))
    large = rng.permutation(np.flatnonzero(labels > 5))
    k_low, k_high = int(round(0.8 * size)), int(round(0.2 * size))
    low = np.concatenate([small[:k_low], large[:size - k_low]])
    high = np.concatenate([small[k_low:k_low + k_high], large[size - k_low:size - k_low + size - k_high]])
    used = np.zeros(labels.size, bool)
    used[low] = used[high] = True
    # the target: the same number of every digit (as many as the scarcest digit has left), shuffled
    per_digit = min(int(np.sum(~used & (labels == d))) for d in range(10))
    target = rng.permutation(np.concatenate([np.flatnonzero(~used & (labels == d))[:per_digit] for d in range(10)]))
    pick = lambda idx: {"x": jnp.asarray(images[idx], jnp.float32), "y": jnp.asarray(labels[idx], jnp.int32)}  # noqa: E731
    return pick(low), pick(high), pick(target)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/defection_free")
    parser.add_argument("--rounds", type=int, default=100, help="collaboration rounds per scheme (default 100)")
    parser.add_argument("--firm-size", type=int, default=1000, help="training images per firm (default 1,000)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate of every step (default 0.01)")
    parser.add_argument("--lr-low", type=float, default=None, help="the low firm's trial step (default --lr)")
    parser.add_argument("--pretrain-epochs", type=int, default=10, help="the high firm's own epochs (default 10)")
    parser.add_argument("--max-inner", type=int, default=5, help="Algorithm 5's inner steps per round at most")
    parser.add_argument("--target-size", type=int, default=1000, help="target images the qualities are measured on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run's results in --out")
    args = experiment_args(parser, argv, "defection_free.py")
    data = load_mnist_5k()
    try:  # bad options: one line, exit status 2, nothing written
        for flag, value in (("--rounds", args.rounds), ("--firm-size", args.firm_size),
                            ("--max-inner", args.max_inner), ("--target-size", args.target_size)):
            check_int(flag, value)
        check_int("--pretrain-epochs", args.pretrain_epochs, 0)
        for flag, value in (("--lr", args.lr), ("--lr-low", args.lr_low)):
            if value is not None:
                check_real(flag, value, low=0.0, low_open=True)
        if 2 * args.firm_size > len(data.labels) - 500:
            raise ValueError(f"--firm-size {args.firm_size} leaves fewer than 500 target images")
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    low_data, high_data, target = firm_datasets(data.images, np.asarray(data.labels), args.firm_size, args.seed)
    target = {k: v[:args.target_size] for k, v in target.items()}
    model = make_model("lenet5", low_data["x"].shape[1:], 10)
    key_low, key_high, key_batches = jax.random.split(jax.random.PRNGKey(args.seed), 3)

    def cross_entropy(params, batch):
        logits = model.logits(params, batch["x"])
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]))

    def accuracy(params, data):
        return jnp.mean(jnp.argmax(model.logits(params, data["target"]["x"]), -1) == data["target"]["y"])

    x_high = pretrain(model.init(key_high), high_data, cross_entropy, args.pretrain_epochs, args.lr, key_batches)
    x_low = model.init(key_low)
    results = {"settings": experiment_settings(args), "version": __version__,
               "data": {"firm_images": args.firm_size, "target_images": int(target["y"].shape[0]),
                        "low_share_0_5": float(jnp.mean(low_data["y"] <= 5)),
                        "high_share_0_5": float(jnp.mean(high_data["y"] <= 5))},
               "schemes": {}}
    arrays = {"low": low_data, "high": high_data, "target": target}  # arguments of the compiled rounds
    results["start"] = {"q_low": float(accuracy(x_low, arrays)), "q_high": float(accuracy(x_high, arrays))}
    if not 0 < results["start"]["q_low"] < results["start"]["q_high"]:
        print(f"error: after --pretrain-epochs {args.pretrain_epochs} the high-quality firm's target accuracy "
              f"{results['start']['q_high']:.3f} is not above the low firm's {results['start']['q_low']:.3f}; "
              "pre-train longer or with a larger --lr", file=sys.stderr)
        return 2
    common = dict(rounds=args.rounds, lr_high=args.lr, lr_low=args.lr_low or args.lr, max_inner=args.max_inner,
                  quality=accuracy, data=arrays)
    losses = (lambda p, d: cross_entropy(p, d["low"]), lambda p, d: cross_entropy(p, d["high"]))
    runs = {}
    for scheme in ("complete", "high-shares", "low-shares"):
        runs[scheme] = run_scheme(scheme, *losses, x_low, x_high, **common)
    q_max = float(max(runs["complete"].q_low.max(), runs["complete"].q_high.max()))
    runs["defection-free"] = run_scheme("defection-free", *losses, x_low, x_high, q_max=q_max, **common)
    for scheme in SCHEMES:
        r = runs[scheme]
        results["schemes"][scheme] = {k: getattr(r, k).tolist() for k in ("q_low", "q_high", "u_low", "u_high", "rho",
                                                                          "nash")}
    free = runs["defection-free"]
    results.update(q_max=q_max, nash_solution={"q_low": free.q_low_star, "q_high": free.q_high_star,
                                               "rho": free.q_low_star / free.q_high_star})
    plot_schemes(runs, args.out)
    claims = check_claims(runs)
    results.update(claims=claims, seconds=time.perf_counter() - start)
    write_json(os.path.join(args.out, "defection_free.json"), results)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary(args, results))
    print(f"wrote {args.out}/defection_free.json, summary.md and fig3_1..3.png in {results['seconds']:.0f} s")
    return 0


def pretrain(params, data, loss, epochs, lr, key, batch=50):
    """``epochs`` passes of minibatch SGD over the firm's own images."""
    n = data["y"].shape[0]
    grad = jax.jit(jax.grad(loss))
    for epoch in range(epochs):
        order = jax.random.permutation(jax.random.fold_in(key, epoch), n)
        for i in range(0, n - batch + 1, batch):
            rows = order[i:i + batch]
            g = grad(params, {"x": data["x"][rows], "y": data["y"][rows]})
            params = jax.tree.map(lambda p, d: p - lr * d, params, g)
    return params


def plot_schemes(runs, out):
    titles = {"complete": "Fig. 3.1: Complete Collaboration", "high-shares": "only the high-quality firm shares",
              "low-shares": "only the low-quality firm shares", "defection-free": "Fig. 3.3: Algorithm 5"}
    for name, schemes in (("fig3_1.png", ["complete"]), ("fig3_2.png", ["high-shares", "low-shares"]),
                          ("fig3_3.png", ["defection-free"])):
        panels = 3 if name == "fig3_3.png" else 2
        fig, axes = figure_for_file(len(schemes), panels, figsize=(4.2 * panels, 3.4 * len(schemes)), squeeze=False)
        for row, scheme in enumerate(schemes):
            r = runs[scheme]
            ax = axes[row][0]
            ax.plot(r.q_low, label="low-quality firm")
            ax.plot(r.q_high, label="high-quality firm")
            ax.set_title(f"{titles[scheme]}: qualities")
            ax.set_xlabel("round")
            ax.legend()
            ax = axes[row][1]
            ax.plot(r.u_low, label="U_l")
            ax.plot(r.u_high, label="U_h")
            ax.set_title("revenues")
            ax.set_xlabel("round")
            ax.legend()
            if panels == 3:
                ax = axes[row][2]
                ax.plot(r.rho, label="rho_t = q_l / q_h")
                ax.axhline(r.q_low_star / r.q_high_star, color="grey", ls="--", label="rho*")
                ax2 = ax.twinx()
                ax2.plot(r.nash, color="C2", label="Nash objective")
                ax.set_title("rho_t and the Nash objective")
                ax.set_xlabel("round")
                ax.legend(loc="lower right")
        fig.savefig(os.path.join(out, name), dpi=110, bbox_inches="tight")


def check_claims(runs) -> list:
    def claim(text, measured, holds):
        return {"claim": text, "measured": measured, "holds": bool(holds)}

    c, h, lo, f = runs["complete"], runs["high-shares"], runs["low-shares"], runs["defection-free"]
    tolerance = 1e-6
    return [
        claim("Fig. 3.1: under Complete Collaboration both revenues fall towards 0",
              {"u_low": [float(c.u_low[0]), float(c.u_low[-1])], "u_high": [float(c.u_high[0]), float(c.u_high[-1])]},
              c.u_high[-1] < 0.25 * c.u_high[0]),
        claim("Fig. 3.2a: when only the high-quality firm shares, the high-quality firm loses revenue",
              {"u_high_start": float(h.u_high[0]), "u_high_min": float(h.u_high.min())}, h.u_high.min() < h.u_high[0]),
        claim("Fig. 3.2b: when only the low-quality firm shares, both revenues grow",
              {"u_low": [float(lo.u_low[0]), float(lo.u_low[-1])], "u_high": [float(lo.u_high[0]), float(lo.u_high[-1])]},
              lo.u_low[-1] > lo.u_low[0] and lo.u_high[-1] > lo.u_high[0]),
        claim("Fig. 3.3: under Algorithm 5 no revenue decreases at any round (Proposition 3)",
              {"worst_drop_low": float(np.diff(f.u_low).min()), "worst_drop_high": float(np.diff(f.u_high).min())},
              np.diff(f.u_low).min() > -tolerance and np.diff(f.u_high).min() > -tolerance),
        claim("Fig. 3.3: both qualities increase under Algorithm 5",
              {"q_low": [float(f.q_low[0]), float(f.q_low[-1])], "q_high": [float(f.q_high[0]), float(f.q_high[-1])]},
              f.q_low[-1] > f.q_low[0] and f.q_high[-1] > f.q_high[0]),
        claim("Fig. 3.3: revenues end above One-sided Collaboration's (only the low firm sharing)",
              {"algorithm_5": [float(f.u_low[-1]), float(f.u_high[-1])],
               "low_shares": [float(lo.u_low[-1]), float(lo.u_high[-1])]},
              f.u_low[-1] >= lo.u_low[-1] and f.u_high[-1] >= lo.u_high[-1] - tolerance),
        claim("Fig. 3.3: rho_t approaches rho*",
              {"rho_end": float(f.rho[-1]), "rho_star": f.q_low_star / f.q_high_star},
              abs(f.rho[-1] - f.q_low_star / f.q_high_star) < 0.05),
    ]


def summary(args, results) -> str:
    lines = ["# Defection-Free Collaborative Learning on MNIST (thesis ch. 3, §3.5): the claims in this run", "",
             f"`python experiments/defection_free.py --rounds {args.rounds} --firm-size {args.firm_size} --lr {args.lr}"
             f" --pretrain-epochs {args.pretrain_epochs}`, fedjax-clust {__version__}; start qualities "
             f"{results['start']['q_low']:.3f} / {results['start']['q_high']:.3f}, q_max {results['q_max']:.3f}, "
             f"Nash solution q_l* = {results['nash_solution']['q_low']:.3f}.", "",
             "| claim | holds | measured |", "| --- | --- | --- |"]
    for c in results["claims"]:
        lines.append(f"| {c['claim']} | {'yes' if c['holds'] else '**no**'} | {str(c['measured']).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
