"""Werner's thesis, ch. 3, §3.5: two competing firms on MNIST under the collaboration schemes (Figs. 3.1-3.3).

    python experiments/defection_free.py --out experiments/results/defection_free

Two firms with 1,000 training images each: the low-quality firm's labels have empirical CDF F(5) = 0.8 (80% of
its images are digits 0-5), the high-quality firm's F(5) = 0.2; the target distribution is drawn from the other
images of the offline MNIST subset (mnist-5k), the same number of every digit (250 each with the default sizes;
``--target-size`` of them are used), or with ``--dataset mnist`` (tensorflow-datasets) the firms' images from
MNIST's training split and the MNIST test set as the target, as the thesis. LeNet-5, cross-entropy, SGD steps with
learning rate 0.01 (``--lr``) on minibatches of ``--batch-size`` images of each firm (one step per firm and
round; the thesis uses PyTorch's SGD; 0: full-batch steps); the high-quality firm is pre-trained for 10 epochs
on its own images (``--pretrain-epochs``); the low-quality firm starts from its initialisation, or is pre-trained
too (``--pretrain-low-epochs``: §3.4 assumes both firms saturated their own training before collaborating, while
§3.5 pre-trains only the high firm). ``--seeds`` independent runs (initialisations, pre-training order and
minibatches; the firms' images are the same) are vmapped into one compiled program per scheme.

Choices the thesis leaves open: a model's quality q is its accuracy on the target images (the thesis's
q = 1 - f needs a loss in [0, 1]; the firms still train on the mean of their two cross-entropies, the objective
(3.1)); a pre-training epoch is one pass of minibatches of 50 of the firm's own images; the best attainable
quality q_max of the Nash bargaining solution (Proposition 2) is, per seed, the best target accuracy Complete
Collaboration reaches in the same number of rounds; the low firm's inner loop takes trial steps of ``--lr-low``
(halved on overshooting q_hat, at most ``--max-inner`` per round, each on a fresh minibatch); a step that would
lower the stepping firm's target accuracy is not taken under Algorithm 5 (``monotone``, §3.4's assumption 4).
A claim holds when it holds on every seed; ``summary.md`` counts the seeds.

Writes ``defection_free.json`` (per scheme, seed and round: both qualities, both revenues, rho_t, the Nash objective),
``summary.md`` (the chapter's claims about Figs. 3.1-3.3 and whether they hold) and ``fig3_1.png``,
``fig3_2.png`` (both one-sided schemes), ``fig3_3.png``.
"""

from __future__ import annotations

import dataclasses
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
from fedjax_clust.data.sources import load_mnist_5k, load_tfds
from fedjax_clust.incentives.defection_free import SCHEMES, SchemeSettings, run_scheme
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance
from fedjax_clust.models.zoo import make_model

OUTPUTS = ("defection_free.json", "summary.md", "config.toml", "fig3_1.png", "fig3_2.png", "fig3_3.png")


def firm_datasets(images, labels, size: int, seed: int, target=None):
    """(low, high, target) image sets: ``size`` images each for the firms, 80% / 20% of them digits 0-5, and as
    the target either ``target`` = (images, labels) (shuffled; the thesis's MNIST test set) or, when None, the
    remaining images with the same number of every digit."""
    rng = np.random.default_rng(seed)
    small = rng.permutation(np.flatnonzero(labels <= 5))
    large = rng.permutation(np.flatnonzero(labels > 5))
    k_low, k_high = int(round(0.8 * size)), int(round(0.2 * size))
    if k_low + k_high > small.size or 2 * size - k_low - k_high > large.size:
        raise ValueError(
            f"--firm-size {size} needs {k_low + k_high} images of digits 0-5 and "
            f"{2 * size - k_low - k_high} of 6-9; the dataset has {small.size} and {large.size}"
        )
    low = np.concatenate([small[:k_low], large[: size - k_low]])
    high = np.concatenate([small[k_low : k_low + k_high], large[size - k_low : size - k_low + size - k_high]])

    def pick(x, y, idx):
        return {"x": jnp.asarray(x[idx], jnp.float32), "y": jnp.asarray(y[idx], jnp.int32)}

    if target is not None:
        x, y = target
        return pick(images, labels, low), pick(images, labels, high), pick(x, np.asarray(y), rng.permutation(len(y)))
    used = np.zeros(labels.size, bool)
    used[low] = used[high] = True
    # the target: the same number of every digit (as many as the scarcest digit has left), shuffled
    per_digit = min(int(np.sum(~used & (labels == d))) for d in range(10))
    rest = rng.permutation(np.concatenate([np.flatnonzero(~used & (labels == d))[:per_digit] for d in range(10)]))
    return pick(images, labels, low), pick(images, labels, high), pick(images, labels, rest)


def load_firm_data(dataset: str, data_dir, firm_size: int, seed: int):
    """The firms' and the target images of ``dataset``: mnist-5k (offline; the target from the images the firms
    do not hold) or mnist / tfds:mnist (the firms from MNIST's training split, the target its test set, as the
    thesis)."""
    if dataset == "mnist-5k":
        data = load_mnist_5k()
        if 2 * firm_size > len(data.labels) - 500:
            raise ValueError(f"--firm-size {firm_size} leaves fewer than 500 target images of mnist-5k")
        return firm_datasets(data.images, np.asarray(data.labels), firm_size, seed)
    if dataset in ("mnist", "tfds:mnist"):
        train = load_tfds("mnist", split="train", data_dir=data_dir)
        test = load_tfds("mnist", split="test", data_dir=data_dir)
        return firm_datasets(
            train.images, np.asarray(train.labels), firm_size, seed, target=(test.images, np.asarray(test.labels))
        )
    raise ValueError(f"--dataset must be mnist-5k or mnist (tfds:mnist), got {dataset!r}")


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/defection_free")
    parser.add_argument("--rounds", type=int, default=100, help="collaboration rounds per scheme (default 100)")
    parser.add_argument("--firm-size", type=int, default=1000, help="training images per firm (default 1,000)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate of every step (default 0.01)")
    parser.add_argument("--lr-low", type=float, default=None, help="the low firm's trial step (default --lr)")
    parser.add_argument(
        "--batch-size", type=int, default=50, help="images per firm and step (default 50; 0: full-batch gradient steps)"
    )
    parser.add_argument("--pretrain-epochs", type=int, default=10, help="the high firm's own epochs (default 10)")
    parser.add_argument(
        "--pretrain-low-epochs",
        type=int,
        default=0,
        help="the low firm's own epochs before collaborating (default 0, as the thesis's §3.5)",
    )
    parser.add_argument("--max-inner", type=int, default=5, help="Algorithm 5's inner steps per round at most")
    parser.add_argument("--target-size", type=int, default=1000, help="target images the qualities are measured on")
    parser.add_argument(
        "--seeds",
        type=int,
        default=5,
        help="independent runs (initialisations, pre-training order, minibatches), vmapped",
    )
    parser.add_argument("--seed", type=int, default=0, help="the first seed and the firms' data split")
    parser.add_argument(
        "--dataset",
        default="mnist-5k",
        help="mnist-5k (offline, default) or mnist (tensorflow-datasets' MNIST: the firms from its "
        "training split, the target its test set, as the thesis; needs the datasets extra and "
        "a download or --data-dir)",
    )
    parser.add_argument("--data-dir", default=None, help="tensorflow-datasets' data directory (--dataset mnist)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run's results in --out")
    args = experiment_args(parser, argv, "defection_free.py")
    try:  # bad options: one line, exit status 2, nothing written
        for flag, value in (
            ("--rounds", args.rounds),
            ("--firm-size", args.firm_size),
            ("--seeds", args.seeds),
            ("--max-inner", args.max_inner),
            ("--target-size", args.target_size),
        ):
            check_int(flag, value)
        for flag, value in (
            ("--pretrain-epochs", args.pretrain_epochs),
            ("--pretrain-low-epochs", args.pretrain_low_epochs),
            ("--batch-size", args.batch_size),
        ):
            check_int(flag, value, 0)
        for flag, value in (("--lr", args.lr), ("--lr-low", args.lr_low)):
            if value is not None:
                check_real(flag, value, low=0.0, low_open=True)
        if args.batch_size > args.firm_size:
            raise ValueError(f"--batch-size {args.batch_size} exceeds --firm-size {args.firm_size}")
        low_data, high_data, target = load_firm_data(args.dataset, args.data_dir, args.firm_size, args.seed)
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    target = {k: v[: args.target_size] for k, v in target.items()}
    model = make_model("lenet5", low_data["x"].shape[1:], 10)
    seeds = jnp.arange(args.seed, args.seed + args.seeds)
    keys = jax.vmap(lambda s: jnp.stack(jax.random.split(jax.random.PRNGKey(s), 5)))(seeds)
    init_low, init_high, order_low, order_high, steps = (keys[:, i] for i in range(5))

    def cross_entropy(params, batch):
        logits = model.logits(params, batch["x"])
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]))

    def accuracy(params, data):
        return jnp.mean(jnp.argmax(model.logits(params, data["target"]["x"]), -1) == data["target"]["y"])

    progress(
        f"pre-training {args.seeds} seed(s): the high firm {args.pretrain_epochs} epoch(s), the low firm "
        f"{args.pretrain_low_epochs}"
    )
    x_high = pretrain(
        jax.vmap(model.init)(init_high), high_data, cross_entropy, args.pretrain_epochs, args.lr, order_high
    )
    x_low = pretrain(
        jax.vmap(model.init)(init_low), low_data, cross_entropy, args.pretrain_low_epochs, args.lr, order_low
    )
    arrays = {"low": low_data, "high": high_data, "target": target}  # arguments of the compiled rounds
    seed_accuracy = jax.jit(jax.vmap(accuracy, in_axes=(0, None)))
    q_low0, q_high0 = np.asarray(seed_accuracy(x_low, arrays)), np.asarray(seed_accuracy(x_high, arrays))
    results = {
        "settings": experiment_settings(args),
        "version": __version__,
        "provenance": provenance(),
        "data": {
            "dataset": args.dataset,
            "firm_images": args.firm_size,
            "target_images": int(target["y"].shape[0]),
            "low_share_0_5": float(jnp.mean(low_data["y"] <= 5)),
            "high_share_0_5": float(jnp.mean(high_data["y"] <= 5)),
        },
        "seeds": list(range(args.seed, args.seed + args.seeds)),
        "start": {"q_low": q_low0.tolist(), "q_high": q_high0.tolist()},
        "schemes": {},
    }
    behind = [i for i in range(args.seeds) if not 0 < q_low0[i] < q_high0[i]]
    if behind:
        i = behind[0]
        print(
            f"error: after --pretrain-epochs {args.pretrain_epochs} the high-quality firm's target accuracy "
            f"{q_high0[i]:.3f} is not above the low firm's {q_low0[i]:.3f} (seed {args.seed + i}); "
            "pre-train longer or with a larger --lr",
            file=sys.stderr,
        )
        return 2
    settings = SchemeSettings(lr_high=args.lr, lr_low=args.lr_low or args.lr, max_inner=args.max_inner)
    common = dict(
        rounds=args.rounds,
        quality=accuracy,
        data=arrays,
        batched=True,
    )
    if args.batch_size:  # minibatch SGD steps: each loss draws its firm's batch with the step's key

        def minibatch_loss(firm):
            def loss(p, d, k):
                rows = jax.random.choice(k, d[firm]["y"].shape[0], (args.batch_size,), replace=False)
                return cross_entropy(p, jax.tree.map(lambda a: a[rows], d[firm]))

            return loss

        losses = (minibatch_loss("low"), minibatch_loss("high"))
        common["key"] = steps
    else:
        losses = (lambda p, d: cross_entropy(p, d["low"]), lambda p, d: cross_entropy(p, d["high"]))
    runs = {}
    for scheme in SCHEMES:
        began = time.perf_counter()
        if scheme == "defection-free":
            # q_max per seed: the best target accuracy Complete Collaboration reached in as many rounds
            q_max = np.maximum(runs["complete"].q_low.max(1), runs["complete"].q_high.max(1))
            with_q_max = dataclasses.replace(settings, q_max=q_max)
            runs[scheme] = run_scheme(scheme, *losses, x_low, x_high, settings=with_q_max, **common)
        else:
            runs[scheme] = run_scheme(scheme, *losses, x_low, x_high, settings=settings, **common)
        progress(f"{scheme}: {args.rounds} rounds x {args.seeds} seed(s) in {time.perf_counter() - began:.0f} s")
    for scheme in SCHEMES:
        r = runs[scheme]
        results["schemes"][scheme] = {
            k: getattr(r, k).tolist() for k in ("q_low", "q_high", "u_low", "u_high", "rho", "nash")
        }
    free = runs["defection-free"]
    results.update(
        q_max=q_max.tolist(),
        nash_solution={
            "q_low": free.q_low_star.tolist(),
            "q_high": free.q_high_star.tolist(),
            "rho": (free.q_low_star / free.q_high_star).tolist(),
        },
    )
    plot_schemes(runs, args.out)
    claims = check_claims(runs)
    results.update(claims=claims, seconds=time.perf_counter() - start)
    write_json(os.path.join(args.out, "defection_free.json"), results)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary(args, results))
    print(f"wrote {args.out}/defection_free.json, summary.md and fig3_1..3.png in {results['seconds']:.0f} s")
    return 0


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pretrain(params, data, loss, epochs, lr, keys, batch=50):
    """``epochs`` passes of minibatch SGD over the firm's own images, for every seed at once (``params`` and
    ``keys`` carry the seed axis; one compiled scan over the epochs' minibatches, vmapped over the seeds)."""
    n = data["y"].shape[0]
    per_epoch = n // batch
    if epochs == 0:
        return params

    def one_seed(p, key):
        def epoch(p, k):
            order = jax.random.permutation(k, n)[: per_epoch * batch].reshape(per_epoch, batch)

            def step(p, rows):
                g = jax.grad(loss)(p, jax.tree.map(lambda a: a[rows], data))
                return jax.tree.map(lambda a, b: a - lr * b, p, g), None

            return jax.lax.scan(step, p, order)[0], None

        return jax.lax.scan(epoch, p, jax.random.split(key, epochs))[0]

    return jax.jit(jax.vmap(one_seed))(params, keys)


def _band(ax, values, label, **style):
    """Mean over seeds (rows) with the min-max band."""
    values = np.atleast_2d(values)
    (line,) = ax.plot(values.mean(0), label=label, **style)
    if values.shape[0] > 1:
        ax.fill_between(np.arange(values.shape[1]), values.min(0), values.max(0), color=line.get_color(), alpha=0.2)


def plot_schemes(runs, out):
    titles = {
        "complete": "Fig. 3.1: Complete Collaboration",
        "high-shares": "only the high-quality firm shares",
        "low-shares": "only the low-quality firm shares",
        "defection-free": "Fig. 3.3: Algorithm 5",
    }
    for name, schemes in (
        ("fig3_1.png", ["complete"]),
        ("fig3_2.png", ["high-shares", "low-shares"]),
        ("fig3_3.png", ["defection-free"]),
    ):
        panels = 3 if name == "fig3_3.png" else 2
        fig, axes = figure_for_file(len(schemes), panels, figsize=(4.2 * panels, 3.4 * len(schemes)), squeeze=False)
        for row, scheme in enumerate(schemes):
            r = runs[scheme]
            ax = axes[row][0]
            _band(ax, r.q_low, "low-quality firm")
            _band(ax, r.q_high, "high-quality firm")
            ax.set_title(f"{titles[scheme]}: qualities")
            ax.set_xlabel("round")
            ax.legend()
            ax = axes[row][1]
            _band(ax, r.u_low, "U_l")
            _band(ax, r.u_high, "U_h")
            ax.set_title("revenues (mean, min-max over seeds)")
            ax.set_xlabel("round")
            ax.legend()
            if panels == 3:
                ax = axes[row][2]
                _band(ax, r.rho, "rho_t = q_l / q_h")
                ax.axhline(float(np.mean(r.q_low_star / r.q_high_star)), color="grey", ls="--", label="rho* (mean)")
                ax2 = ax.twinx()
                _band(ax2, r.nash, "Nash objective", color="C2")
                ax.set_title("rho_t (left axis) and the Nash objective (right)")
                ax.set_xlabel("round")
                lines, labels = ax.get_legend_handles_labels()
                more, more_labels = ax2.get_legend_handles_labels()
                ax.legend(lines + more, labels + more_labels, loc="lower right", fontsize=8)
        fig.savefig(os.path.join(out, name), dpi=110, bbox_inches="tight")


def check_claims(runs) -> list:
    """Each claim of §3.5 checked on every seed (rows of the runs' arrays): it holds when it holds on every
    seed; ``seeds_holding`` counts the seeds where it does."""

    def claim(text, measured, per_seed):
        per_seed = np.asarray(per_seed, bool)
        return {
            "claim": text,
            "measured": measured,
            "seeds_holding": int(per_seed.sum()),
            "seeds": int(per_seed.size),
            "holds": bool(per_seed.all()),
        }

    def ends(a):
        return {"start": a[:, 0].tolist(), "end": a[:, -1].tolist()}

    c, h, lo, f = runs["complete"], runs["high-shares"], runs["low-shares"], runs["defection-free"]
    tolerance = 1e-6
    rho_star = f.q_low_star / f.q_high_star
    return [
        claim(
            "Fig. 3.1: under Complete Collaboration both revenues fall towards 0",
            {"u_low": ends(c.u_low), "u_high": ends(c.u_high)},
            c.u_high[:, -1] < 0.25 * c.u_high[:, 0],
        ),
        claim(
            "Fig. 3.2a: when only the high-quality firm shares, the high-quality firm loses revenue",
            {"u_high_start": h.u_high[:, 0].tolist(), "u_high_min": h.u_high.min(1).tolist()},
            h.u_high.min(1) < h.u_high[:, 0],
        ),
        claim(
            "Fig. 3.2b: when only the low-quality firm shares, both revenues grow",
            {"u_low": ends(lo.u_low), "u_high": ends(lo.u_high)},
            (lo.u_low[:, -1] > lo.u_low[:, 0]) & (lo.u_high[:, -1] > lo.u_high[:, 0]),
        ),
        claim(
            "Fig. 3.3: under Algorithm 5 no revenue decreases at any round (Proposition 3)",
            {
                "worst_drop_low": np.diff(f.u_low, axis=1).min(1).tolist(),
                "worst_drop_high": np.diff(f.u_high, axis=1).min(1).tolist(),
            },
            (np.diff(f.u_low, axis=1).min(1) > -tolerance) & (np.diff(f.u_high, axis=1).min(1) > -tolerance),
        ),
        claim(
            "Fig. 3.3: both qualities increase under Algorithm 5",
            {"q_low": ends(f.q_low), "q_high": ends(f.q_high)},
            (f.q_low[:, -1] > f.q_low[:, 0]) & (f.q_high[:, -1] > f.q_high[:, 0]),
        ),
        claim(
            "Fig. 3.3: revenues end above One-sided Collaboration's (only the low firm sharing)",
            {
                "algorithm_5": [f.u_low[:, -1].tolist(), f.u_high[:, -1].tolist()],
                "low_shares": [lo.u_low[:, -1].tolist(), lo.u_high[:, -1].tolist()],
            },
            (f.u_low[:, -1] >= lo.u_low[:, -1]) & (f.u_high[:, -1] >= lo.u_high[:, -1] - tolerance),
        ),
        claim(
            "Fig. 3.3: rho_t approaches rho* (within 0.05)",
            {"rho_end": f.rho[:, -1].tolist(), "rho_star": rho_star.tolist()},
            np.abs(f.rho[:, -1] - rho_star) < 0.05,
        ),
    ]


def summary(args, results) -> str:
    def mean(values):
        return f"{np.mean(values):.3f}"

    lines = [
        "# Defection-Free Collaborative Learning on MNIST (thesis ch. 3, §3.5): the claims in this run",
        "",
        f"`python experiments/defection_free.py --config config.toml` ({args.rounds} rounds, "
        f"{args.seeds} seeds, lr {args.lr}, batch {args.batch_size or 'full'}, pre-training "
        f"{args.pretrain_epochs} / {args.pretrain_low_epochs} epochs (high / low firm)), fedjax-clust "
        f"{__version__}; mean over seeds: start qualities {mean(results['start']['q_low'])} / "
        f"{mean(results['start']['q_high'])}, q_max {mean(results['q_max'])}, Nash solution "
        f"q_l* = {mean(results['nash_solution']['q_low'])}.",
        "",
        "| claim | holds (seeds) | measured |",
        "| --- | --- | --- |",
    ]
    for c in results["claims"]:
        verdict = "yes" if c["holds"] else "**no**"
        measured = str(c["measured"]).replace("|", "/")
        lines.append(f"| {c['claim']} | {verdict} ({c['seeds_holding']} of {c['seeds']}) | {measured} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
