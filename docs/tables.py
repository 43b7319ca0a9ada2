"""The docs' generated blocks, made from committed result files (never typed by hand).

A page of docs/ (or the README) holds a generated block between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``; NAME is a function of :data:`TABLES`, which reads files under ``experiments/results``
and returns the block's markdown.

    python docs/tables.py            # rewrite every generated block from the result files
    python docs/tables.py --check    # exit 1 naming the stale blocks (the test suite runs this check)

The blocks are formatted by this checkout's fedjax_clust, which needs its dependencies (jax, ...). Run by a
Python without them, the script runs itself again with the checkout's virtual environment (``.venv``, as the
README makes it) when there is one, and otherwise says what to install.
"""

from __future__ import annotations

import pathlib
import re
import statistics
import sys
from types import SimpleNamespace

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results"
BLOCK = re.compile(r"(<!-- generated: (\S+)(?: (\S+))? -->\n)(.*?)(<!-- end generated -->)", re.S)


def _load(results: pathlib.Path, path: str):
    """The JSON file ``results/path`` (ValueError naming it when it does not parse)."""
    from fedjax_clust.io.jsonio import read_json

    return read_json(str(results / path))


def _jsonl(results: pathlib.Path, path: str) -> list:
    """The JSON-lines file ``results/path`` (a benchmark's rows)."""
    from fedjax_clust.io.jsonio import read_json_lines

    return read_json_lines(str(results / path))


def default_experiment(results: pathlib.Path = RESULTS) -> str:
    """The table ``fedjax-clust compare --out results`` prints, from ``experiments/results/default``."""
    from fedjax_clust.run.compare import format_table

    results = _load(results, "default/results.json")
    table = format_table({name: SimpleNamespace(summary=summary) for name, summary in results.items()})
    first = next(iter(results.values()))
    return (
        "```\n" + "\n".join(line.rstrip() for line in table.splitlines()) + "\n```\n\n"
        f"(`experiments/results/default/`, made by `fedjax-clust compare --out experiments/results/default` "
        f"with fedjax-clust {first['version']}; seconds per round on the 2-core CPU that ran it.)\n"
    )


def classification_accuracies(results: pathlib.Path = RESULTS) -> str:
    """Final test accuracy per algorithm on the classification task, from ``experiments/results/classification``."""
    results = _load(results, "classification/results.json")
    first = next(iter(results.values()))
    lines = ["| algorithm | test accuracy (%) |", "| --- | --- |"]
    lines += [f"| {name} | {100 * summary['test_accuracy']:.1f} |" for name, summary in results.items()]
    return "\n".join(lines) + (
        f"\n\n({first['task_config']['num_clusters']} clusters x "
        f"{first['task_config']['clients_per_cluster']} clients, {first['rounds']} rounds; "
        "`fedjax-clust compare --task classification --algorithms "
        f"{','.join(results)} --clients-per-cluster "
        f"{first['task_config']['clients_per_cluster']} --rounds {first['rounds']} --out "
        "experiments/results/classification`.)\n"
    )


def fig2_constants(results: pathlib.Path = RESULTS) -> str:
    """Werner et al. Fig. 2's measured constants, from ``experiments/results/fig2/fig2.json``."""
    result = _load(results, "fig2/fig2.json")
    return (
        f"Measured ({result['task_config']['clients_per_cluster']} clients per cluster, seed "
        f"{result['task_config'].get('seed', 0)}; `experiments/results/fig2/`): A² ≤ "
        f"{result['A_squared_upper_bound']:.3f} and Δ² ≥ {result['Delta_squared_lower_bound']:.4g}, both "
        "bounded over the run as in the paper's Fig. 2.\n"
    )


def bench_linear(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --clients 300`` (every algorithm's round on the synthetic task and the Python pair
    loop, same run), from ``experiments/results/bench/linear.jsonl``."""
    rows = _jsonl(results, "bench/linear.jsonl")
    reference = next(r for r in rows if r.get("benchmark") == "reference")
    timed = [r for r in rows if "algorithm" in r]
    n = timed[0]["clients"]
    lines = [
        f"| configuration (N = {n}, d = 10, n = 9, 10 clustering steps) | seconds per round (one call) | "
        "seconds per round (fused rounds) |",
        "| --- | --- | --- |",
    ]
    loop = None
    for r in timed:
        if r["implementation"] == "python-pair-loop":
            loop = r
            continue
        label = r["algorithm"]
        if label == "federated-clustering":
            select = f", {r['quantile_select']} select" if "quantile_select" in r else ""
            label += f" ({r['radius_rule']}{select}, {r['devices']} device{'s' if r['devices'] > 1 else ''})"
        fused = r.get("fused_seconds_per_round")
        lines.append(f"| {label} | {r['seconds_per_round']:.3g} | {'' if fused is None else f'{fused:.3g}'} |")
    if loop is not None:
        lines.append(
            f"| federated-clustering, Python loop over the N² client pairs ({loop['radius_rule']}) | "
            f"{loop['seconds_per_round']:.3g} (**{loop['speedup_vmapped_vs_loop']:g}× slower** than the "
            "vmapped round) | |"
        )
    lines.append(
        f"| float32 matmul ({reference['matmul_size']}³) in the same run | "
        f"{reference['matmul_gflops_per_s']:g} GFLOP/s | |"
    )
    fc = next((r for r in timed if r["algorithm"] == "federated-clustering" and "flops_per_round" in r), None)
    if fc is not None:
        lines += [
            "",
            f"The Federated-Clustering round counts {fc['flops_per_round'] / 1e6:.1f} MFLOP (4Bd per pair for "
            "the cross-gradient, 3d + 10·(4d + 4) per pair for the clustering); the first row reaches "
            f"{fc['gflops_per_s']:.3g} GFLOP/s, {100 * fc['fraction_of_matmul']:.1f}% of the matmul rate of the "
            "same run.",
        ]
    return (
        "\n".join(lines) + "\n\n(`experiments/results/bench/linear.jsonl`, made by `fedjax-clust bench "
        f"--clients {n}` on the {reference['device_kind']} of this project's 2-core machine; one run: compare "
        "rows of one run only.)\n"
    )


def _claims_table(results: pathlib.Path, folder: str, name: str) -> str:
    result = _load(results, f"{folder}/{name}")
    lines = ["| claim | holds |", "| --- | --- |"]
    for claim in result["claims"]:
        verdict = "yes" if claim["holds"] else "**no**"
        if "seeds" in claim:
            verdict += f" ({claim['seeds_holding']} of {claim['seeds']} seeds)"
        lines.append(f"| {claim['claim']} | {verdict} |")
    return (
        "\n".join(lines) + f"\n\n(`experiments/results/{folder}/{name}`; each claim's measurements are in its "
        "`summary.md`.)\n"
    )


def defection_free_claims(results: pathlib.Path = RESULTS) -> str:
    """§3.5's claims in the committed lr 0.1 x 300 rounds run."""
    return _claims_table(results, "defection_free", "defection_free.json")


def defection_free_thesis_lr_claims(results: pathlib.Path = RESULTS) -> str:
    """§3.5's claims in the committed run at the thesis's learning rate."""
    return _claims_table(results, "defection_free_thesis_lr", "defection_free.json")


def price_discrimination_claims(results: pathlib.Path = RESULTS) -> str:
    """Ch. 4's claims in the committed run."""
    return _claims_table(results, "price_discrimination", "price_discrimination.json")


def _vector(values, digits: int = 3) -> str:
    """A client parameter vector as the docs print it: (0, 1, 2), signed zeros and float noise rounded away."""
    return "(" + ", ".join(f"{round(v, digits) + 0.0:g}" for v in values) + ")"


def _close(values, target, atol: float = 1e-3) -> bool:
    return len(values) == len(target) and all(abs(v - t) <= atol for v, t in zip(values, target))


FIG1_PAPER = {  # Werner et al. Fig. 1 and its text: where each method's clients end
    ("myopic", "myopic-clustering"): ((0, 1, 2), "client 2 stuck at the saddle x = 1"),
    ("myopic", "federated-clustering"): ((0, 0, 2), "clients 1 and 2 share x = 0"),
    ("ifca", "ifca-1"): ((0, 0), "both clients on cluster model 2"),
    ("ifca", "ifca-2"): ((0, 0), "both clients on cluster model 2"),
    ("ifca", "hypcluster"): ((0, 0), "both clients on cluster model 2"),
    ("ifca", "federated-clustering"): ((-0.5, 0.5), "each client at its own optimum"),
}


def fig1_outcomes(results: pathlib.Path = RESULTS) -> str:
    """Werner et al. Fig. 1: each method's final client parameters against the paper's, from ``fig1/fig1.json``."""
    out = _load(results, "fig1/fig1.json")
    lines = ["| example | method | final client parameters | the paper | holds |", "| --- | --- | --- | --- | --- |"]
    for (example, method), (target, what) in FIG1_PAPER.items():
        final = out[example][method]["final"]
        lines.append(
            f"| Fig. 1{'ab'[example == 'ifca']} ({example}) | {method} | {_vector(final)} | "
            f"{_vector(target)}: {what} | {'yes' if _close(final, target) else '**no**'} |"
        )
    cfl = out["cfl"]["cfl"]
    lines.append(
        f"| Fig. 1c (cfl) | cfl | clients 2 and 3 separated on {100 * cfl['fraction_2_3_separated']:.0f}% "
        f"of {cfl['seeds']} seeds | a split that depends on the sampled gradient | — |"
    )
    lines.append(
        f"| Fig. 1c (cfl) | federated-clustering | {_vector(out['cfl']['federated-clustering']['final'])} | — | — |"
    )
    return "\n".join(lines) + "\n\n(`experiments/results/fig1/fig1.json`; `fig1.png` draws the trajectories.)\n"


FIG3_METHODS = ("federated-clustering", "local", "ifca-1", "global", "ground-truth")


def fig3_table(results: pathlib.Path = RESULTS) -> str:
    """Werner et al. Fig. 3: final mean ||x - x*||^2 per setting and method (mean over seeds), the chosen
    learning rates, and the figure's two claims checked, from ``fig3/fig3.json``."""
    out = _load(results, "fig3/fig3.json")
    config, settings = out["config"], out["settings"]
    lines = ["| setting | " + " | ".join(FIG3_METHODS) + " |", "| --- |" + " --- |" * len(FIG3_METHODS)]
    for name, row in settings.items():
        lines.append(
            f"| {name} | "
            + " | ".join(
                "diverged" if row[m]["final"] is None else f"{row[m]['final']:.2g} (η {row[m]['learning_rate']:g})"
                for m in FIG3_METHODS
            )
            + " |"
        )
    inf = float("inf")

    def final(row, m):
        return inf if row[m]["final"] is None else row[m]["final"]

    beats = [
        name
        for name, row in settings.items()
        if final(row, "federated-clustering") < min(final(row, m) for m in ("local", "ifca-1", "global"))
    ]
    gaps = {
        name: final(row, "federated-clustering") / final(row, "ground-truth")
        for name, row in settings.items()
        if 0 < final(row, "ground-truth") < inf
    }
    lines += [
        "",
        f"Federated-Clustering ends below every non-oracle baseline in {len(beats)} of {len(settings)} "
        f"settings ({'; '.join(beats) or 'none'}); its ratio to Ground-truth is "
        + "; ".join(f"{g:.3g} at {name}" for name, g in gaps.items())
        + ".",
    ]
    return "\n".join(lines) + (
        f"\n\n({config['seeds']} seed{'s' * (config['seeds'] > 1)}, {config['rounds']} rounds, momentum "
        f"{config['momentum']:g} ({config['momentum_form']} form), init "
        f"{config['init']}; `experiments/results/fig3/fig3.json`.)\n"
    )


def clipping_elbows(results: pathlib.Path = RESULTS) -> str:
    """Werner et al. §4.3: the elbow per sigma, from ``clipping/clipping.json``."""
    out = _load(results, "clipping/clipping.json")
    elbows = {sigma: r["elbow"] for sigma, r in out["sigmas"].items()}
    text = ", ".join(f"l = {e} at σ = {float(s):g}" for s, e in elbows.items())
    return (
        f"Measured (`experiments/results/clipping/clipping.json`): the first l whose step improves f by less "
        f"than {100 * out['elbow_threshold']:g}% of the total improvement is {text}; the paper chose "
        "l = 10.\n"
    )


def _script(name: str):
    """``experiments/<name>.py`` as a module (the papers' numbers live beside the code that reproduces them)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _seed_accuracies(tuning: dict, task: str, method: str) -> list:
    """A method's final test accuracy (%) on each seed of a Table 1 run, in seed order."""
    return [100 * r["accuracy"] for r in sorted(tuning[task][method]["seeds"], key=lambda r: r["seed"])]


def table1_orderings(tuning: dict, task: str) -> list:
    """The orderings the paper reads Table 1 as, each as (claim, paired difference, verdict): Federated-Clustering
    above every other non-oracle method and Ground-truth above Federated-Clustering, judged by the paired t
    interval of the per-seed accuracy differences (the methods of a seed share its data split), never by the
    means alone (:func:`fedjax_clust.run.statistics.ordering_verdict`)."""
    from fedjax_clust.run.statistics import ordering_verdict, paired_difference

    methods = list(tuning[task])
    pairs = [("federated-clustering", m) for m in methods if m not in ("federated-clustering", "ground-truth")]
    if "ground-truth" in methods:
        pairs.append(("ground-truth", "federated-clustering"))
    out = []
    for a, b in pairs:
        if a not in methods or b not in methods:
            continue
        diff = paired_difference(_seed_accuracies(tuning, task, a), _seed_accuracies(tuning, task, b), warn=False)
        out.append((f"{_script('table1').LABELS[a]} > {_script('table1').LABELS[b]}", diff, ordering_verdict(diff)))
    return out


def _difference_text(diff) -> str:
    d = diff.difference
    if d.mean is None:
        return f"no finite seed pair ({d.nonfinite} seed{'s' * (d.nonfinite != 1)} diverged)"
    if d.low is None:
        return f"{d.mean:+.1f}"
    return f"{d.mean:+.1f} [{d.low:+.1f}, {d.high:+.1f}], {diff.wins}/{d.n} seeds"


def _fc_schedule_text(meta: dict) -> str:
    """ " (Federated-Clustering: R rounds of ...)" when a Table 1 run gave Federated-Clustering a schedule of its own
    (``tuning.json``'s ``fc_schedule``), and the initial weights when not Flax's; "" for older runs."""
    fc, parts = meta.get("fc_schedule") or {}, []
    if fc.get("rounds") or fc.get("batch_size", 32) != 32:
        parts.append(
            f"Federated-Clustering {fc.get('rounds') or meta['rounds']} rounds of "
            + ("full batches" if fc.get("batch_size") is None else f"batch {fc['batch_size']}")
            + f" with {fc['clustering_steps']} thresholding steps"
        )
    if meta.get("weight_init", "flax") != "flax":
        parts.append(f"{meta['weight_init']} initial weights")
    return f" ({'; '.join(parts)})" if parts else ""


def table1_table(results: pathlib.Path = RESULTS, folder: str = "table1") -> str:
    """Werner et al. Table 1 from one profile's run (``folder``: ``table1``, ours, or ``table1-paper``): our
    accuracy / loss (mean over seeds, with the seeds' range) next to the paper's, the learning rates, the
    orderings the paper's text makes judged against the seeds' spread (paired t intervals, 95%), and what still
    differs from the paper's experiment, from ``FOLDER/table1.json`` and ``FOLDER/tuning.json``."""
    paper = _script("table1").PAPER
    table = _load(results, f"{folder}/table1.json")
    meta = _load(results, f"{folder}/tuning.json")
    tuning = meta["tuning"]
    methods = list(next(iter(table.values())))
    tuned = meta.get("tuned", True)
    lines = ["| task | " + " | ".join(methods) + " |", "| --- |" + " --- |" * len(methods)]
    for task, row in table.items():
        best = max(row, key=lambda m: row[m]["accuracy"])
        cells = []
        for m in methods:
            accuracies = _seed_accuracies(tuning, task, m)
            cell = f"{100 * row[m]['accuracy']:.1f} / {row[m]['loss']:.2f}"
            cell = f"**{cell}**" if m == best else cell
            if len(accuracies) > 1:
                cell += f" ({min(accuracies):.1f}–{max(accuracies):.1f})"
            cells.append(cell)
        lines.append(f"| {task}, measured | " + " | ".join(cells) + " |")
        lines.append(
            f"| {task}, paper | "
            + " | ".join(f"{paper[task][m][0]:.1f} / {paper[task][m][1]:.3f}" for m in methods)
            + " |"
        )
        lines.append(
            f"| {task}, {'tuned ' if tuned else ''}η | "
            + " | ".join(f"{tuning[task][m]['learning_rate']:g}" for m in methods)
            + " |"
        )
    seeds = len(tuning[next(iter(tuning))][methods[0]]["seeds"])
    profile = meta.get("profile", "ours")
    caption = (
        f"\n\nTest accuracy % / loss, mean over the clients and {seeds} seed{'s' * (seeds > 1)}"
        + (" (the seeds' range in brackets)" if seeds > 1 else "")
        + f"; profile **{profile}**; {meta['dataset']}, {meta.get('num_clients', 4 * meta['clients_per_cluster'])} "
        f"clients ({meta['clients_per_cluster']} per cluster), MLP-{meta['hidden']}, {meta['rounds']} rounds"
        + _fc_schedule_text(meta)
        + ", "
        + ("learning rates tuned per method" if tuned else f"learning rate {meta['learning_rates'][0]:g} untuned")
        + (
            f", the rates of `{tuning[next(iter(tuning))][methods[0]]['tuned_in']}`"
            if "tuned_in" in tuning[next(iter(tuning))][methods[0]]
            else ""
        )
        + f" (`experiments/results/{folder}/`).\n"
    )
    verdicts = [
        "",
        "| task | ordering the paper reads | accuracy difference (points) [95% paired interval], "
        "seeds it wins | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for task in table:
        for claim, diff, verdict in table1_orderings(tuning, task):
            verdicts.append(f"| {task} | {claim} | {_difference_text(diff)} | {verdict} |")
    differs = [f"- {d}" for d in meta.get("differences", [])]
    return (
        "\n".join(lines)
        + caption
        + "\n".join(verdicts)
        + ("\n\nWhat still differs from the paper's experiment:\n\n" + "\n".join(differs) if differs else "")
        + "\n"
    )


def reproduce_commands(results: pathlib.Path = RESULTS, paper: str = "werner") -> str:
    """The commands that made ``paper``'s committed result files (``experiments/reproduce.py``'s entries) with
    the time each took when it last ran into ``experiments/results`` (``reproduce.json``)."""
    reproduce = _script("reproduce")
    ledger = results / "reproduce.json"
    costs = _load(results, "reproduce.json")["entries"] if ledger.exists() else {}
    entries = [r for r in reproduce.REPRODUCTIONS if r.paper == paper]
    if not entries:
        raise KeyError(f"reproduce_commands: no entry of paper {paper!r}")
    lines = ["| result | what | last run (wall time; the machine may have been shared) |", "| --- | --- | --- |"]
    for r in entries:
        cost = costs.get(r.name)
        ran = cost is not None and not cost.get("quick") and r.completed(cost.get("status"))
        if ran:
            machine = cost["provenance"]["machine"]
            took = f"{cost['seconds']:.0f} s" if cost["seconds"] < 90 else f"{cost['seconds'] / 60:.0f} min"
            when = (
                f"{took} on {machine['cpus']} CPU cores"
                if machine["backend"] == "cpu"
                else f"{took} on {machine['device']}"
            )
            if r.needs:
                when += f" (runs with `--all` only: {r.needs})"
            if cost.get("note"):
                when += f"; {cost['note']}"
        elif r.needs:
            when = f"needs {r.needs}"
        else:
            when = "not yet run with reproduce.py"
        lines.append(f"| `{r.name}` | {r.what} | {when} |")
    return (
        "```bash\n"
        + f"python experiments/reproduce.py --paper {paper}            # every row below\n"
        + "".join(f"{r.command(reproduce.RESULTS / r.name, False, False)}\n" for r in entries)
        + "```\n\n"
        + "\n".join(lines)
        + "\n"
    )


SRFCA_LABELS = {
    "srfca": "SR-FCA",
    "local": "Local",
    "global": "Global",
    "cfl": "CFL",
    "local-kmeans": "Local-KMeans",
    "ifca": "IFCA (Option I, true K)",
    "one-shot-ifca": "ONE_SHOT-IFCA",
    "fedsoft": "FedSoft, cluster models",
    "fedsoft-personal": "FedSoft, personal models",
    "federated-clustering": "Federated-Clustering",
}


def srfca_orderings(results_of_task: dict, paper_of_task: dict) -> list:
    """The orderings SR-FCA's Table 1 gives between SR-FCA and each method it reports on one task (in the
    direction of the paper's numbers), each as (claim, paired difference in points, verdict), judged by the
    paired t interval of the per-seed accuracy differences (the methods of a seed share its data), never by the
    means alone (:func:`fedjax_clust.run.statistics.ordering_verdict`)."""
    from fedjax_clust.run.statistics import ordering_verdict, paired_difference

    def seeds(method):
        return [None if v is None else 100 * v for v in results_of_task[method]["test_accuracy"]["seeds"]]

    out = []
    for method, theirs in paper_of_task.items():
        if method == "srfca" or method not in results_of_task or "srfca" not in results_of_task:
            continue
        a, b = ("srfca", method) if paper_of_task["srfca"] >= theirs else (method, "srfca")
        diff = paired_difference(seeds(a), seeds(b), warn=False)
        out.append((f"{SRFCA_LABELS[a]} > {SRFCA_LABELS[b]}", diff, ordering_verdict(diff)))
    return out


def srfca_table(results: pathlib.Path = RESULTS, folder: str = "srfca") -> str:
    """SR-FCA's Tables 1, 2 and 4 from one profile's run (``folder``: ``srfca``, ours, or ``srfca-paper``): final
    test accuracy (mean ± std over seeds, misclustering in brackets) per method and task next to the paper's
    full-MNIST numbers, SR-FCA's stages, the orderings of the paper's table judged against the seeds' spread, and
    what still differs from the paper's experiment, from ``FOLDER/srfca.json``."""
    out = _load(results, f"{folder}/srfca.json")
    paper, settings, res = out["paper"], out["settings"], out["results"]
    tasks = list(res)

    def ours(cell):
        acc, mis = cell["test_accuracy"], cell["misclustering"]["mean"]
        text = "diverged" if acc["mean"] is None else f"{100 * acc['mean']:.1f} ± {100 * (acc['std'] or 0):.1f}"
        return text + ("" if mis is None else f" ({mis:.2g})")

    def theirs(task, method):
        acc = paper["accuracy"][task].get(method)
        mis = paper["misclustering"][task].get(method)
        return "–" if acc is None else f"{acc:.2f}" + ("" if mis is None else f" ({mis:.2g})")

    lines = ["| method | " + " | ".join(f"{t} | paper" for t in tasks) + " |", "| --- |" + " --- | --- |" * len(tasks)]
    for method in res[tasks[0]]:
        lines.append(
            f"| {SRFCA_LABELS.get(method, method)} | "
            + " | ".join(f"{ours(res[t][method])} | {theirs(t, method)}" for t in tasks)
            + " |"
        )
    stages = []
    for t in tasks:
        marks = res[t].get("srfca", {}).get("stages", {})
        if marks:
            stages.append(
                f"{t}: "
                + ", ".join(
                    f"{stage.replace('_', ' ')} {v['num_clusters']['mean']:.2g} clusters, misclustering "
                    f"{v['misclustering']['mean']:.2g}"
                    for stage, v in marks.items()
                    if v["misclustering"]["mean"] is not None
                )
            )

    def setup(task):
        c = {**settings, **settings.get("per_task", {}).get(task, {})}
        rounds = c["one_shot_steps"] + 2 * c["refine_iterations"] + c["extra_rounds"]
        return (
            f"{c['clients_per_cluster']} clients per cluster, {rounds} rounds (SR-FCA: T = "
            f"{c['one_shot_steps']} ONE_SHOT rounds, 2 REFINE steps of {c['refine_iterations']}, then "
            f"{c['extra_rounds']} more)"
        )

    setups = {t: setup(t) for t in tasks}
    same = len(set(setups.values())) == 1

    optimizer = settings.get("optimizer") or "sgd"
    caption = (
        f"\n\nFinal test accuracy in %, mean ± std over seeds {', '.join(map(str, settings['seeds']))}, misclustering "
        f"in brackets; profile **{settings.get('profile', 'ours')}**; {settings['dataset']}, MLP-{settings['hidden']}, "
        f"{'Adam' if optimizer == 'adam' else 'SGD'} at {settings['lr']:g}, batch {settings['batch_size']}; "
        + (setups[tasks[0]] if same else "; ".join(f"{t}: {text}" for t, text in setups.items()))
        + f"; λ = {settings['threshold']:g} on the cross-cluster loss (`experiments/results/{folder}/srfca.json`).\n\n"
        + ("**SR-FCA's stages (Table 4)**, mean over seeds: " + "; ".join(stages) + ".\n" if stages else "")
    )
    verdicts = [
        "",
        "| task | ordering in the paper's table | accuracy difference (points) [95% paired interval], "
        "seeds it wins | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for t in tasks:
        for claim, diff, verdict in srfca_orderings(res[t], paper["accuracy"][t]):
            verdicts.append(f"| {t} | {claim} | {_difference_text(diff)} | {verdict} |")
    per_task = settings.get("differences", {})
    shared = [d for d in next(iter(per_task.values()), []) if all(d in ds for ds in per_task.values())]
    differs = [f"- {d}" for d in shared] + [f"- {t}: {d}" for t, ds in per_task.items() for d in ds if d not in shared]
    return (
        "\n".join(lines)
        + caption
        + "\n".join(verdicts)
        + ("\n\nWhat still differs from the paper's experiment:\n\n" + "\n".join(differs) if differs else "")
        + "\n"
    )


GHOSH_RULES = {"KM": "K-means", "KGM": "K-geomedians", "TKM": "Trimmed K-means"}


def ghosh_fig2a(results: pathlib.Path = RESULTS) -> str:
    """Ghosh et al. Fig. 2a: misclustering of the good machines per Stage II iteration, from ``ghosh/ghosh.json``."""
    out = _load(results, "ghosh/ghosh.json")
    curves, settings = out["fig2a"], out["settings"]
    lines = [
        "| rule | " + " | ".join(f"iteration {i}" for i in range(len(curves["KM"]["mean"]))) + " |",
        "| --- |" + " --- |" * len(curves["KM"]["mean"]),
    ]
    for rule, curve in curves.items():
        lines.append(f"| {GHOSH_RULES[rule]} | " + " | ".join(f"{v:.2f}" for v in curve["mean"]) + " |")
    zero = [GHOSH_RULES[r] for r, c in curves.items() if max(t[-1] for t in c["trials"]) == 0]
    return "\n".join(lines) + (
        f"\n\nMean over {len(curves['KM']['trials'])} draws (σ = {settings.get('fig2a_noise', '?')}); "
        + (
            f"{' and '.join(zero)} end{'s' * (len(zero) == 1)} at 0 in every draw."
            if zero
            else "no rule ends at 0 in every draw."
        )
        + " (`experiments/results/ghosh/ghosh.json`, `fig2a.png`.)\n"
    )


def ghosh_fig2b(results: pathlib.Path = RESULTS) -> str:
    """Ghosh et al. Fig. 2b: the estimation error per Stage II x Stage III combination and the paper's three
    claims checked against its ratios, from ``ghosh/ghosh.json``."""
    out = _load(results, "ghosh/ghosh.json")
    part, settings = out["fig2b"], out["settings"]
    combos, ratios = part["combinations"], part["ratios"]
    lines = [
        "| Stage II \\ Stage III | TM (trimmed mean) | SM (sample mean) | FA (robust FedAvg) |",
        "| --- | --- | --- | --- |",
    ]
    for rule in GHOSH_RULES:
        lines.append(
            f"| {rule} | "
            + " | ".join(
                f"{combos[f'{rule}+{agg}']['mean']:.3f} ± {combos[f'{rule}+{agg}']['std']:.3f}"
                for agg in ("TM", "SM", "FA")
            )
            + " |"
        )
    tm_sm, km, fa = _ghosh_checks(ratios)

    def r(name):
        return _cell(ratios.get(name), 1, ".2f")

    claims = [
        (
            "TM's error is ≥ 29% below SM's under robust clustering",
            f"SM is {r('TKM+SM / TKM+TM')}× TM's error under TKM and {r('KGM+SM / KGM+TM')}× under KGM",
            tm_sm is not None and tm_sm <= 0.71,
        ),
        (
            "KM's error is ≥ 53% above the robust rules'",
            f"KM+SM / TKM+TM = {r('KM+SM / TKM+TM')}, KM+TM / TKM+TM = {r('KM+TM / TKM+TM')}, "
            f"KM+TM / KGM+TM = {r('KM+TM / KGM+TM')}",
            km is not None and km >= 1.53,
        ),
        ("FA is orders of magnitude worse", f"TKM+FA / TKM+TM = {r('TKM+FA / TKM+TM')}", fa is not None and fa >= 10),
    ]
    tkm = combos["TKM+TM"]["trials"]
    good = [v for v in tkm if v < 0.3]
    lines += [
        "",
        f"Estimation error max_i ‖ŵ_i − w*_i‖/√d, mean ± std over {len(tkm)} draws "
        f"(σ = {settings.get('fig2b_noise', '?')}); TKM+TM is below 0.3 in {len(good)} of {len(tkm)} draws"
        + (f" ({min(good):.2f}–{max(good):.2f})" if good else "")
        + (f" and {min(v for v in tkm if v >= 0.3):.2f}–{max(tkm):.2f} in the others" if len(good) < len(tkm) else "")
        + ".",
        "",
        "| the paper's claim | ours | holds |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {c} | {o} | {'yes' if h else '**no**'} |" for c, o, h in claims]
    return "\n".join(lines) + "\n\n(`experiments/results/ghosh/ghosh.json`, `fig2b.png`.)\n"


def _yes(holds: bool) -> str:
    return "yes" if holds else "**no**"


def _werner_rows(results):
    rows = []
    fig1 = _load(results, "fig1/fig1.json")
    for example, label in (("myopic", "Fig. 1a"), ("ifca", "Fig. 1b")):
        checks = [(m, target) for (e, m), (target, _) in FIG1_PAPER.items() if e == example]
        held = [m for m, target in checks if _close(fig1[example][m]["final"], target)]
        rows.append(
            (
                label,
                "; ".join(f"{m} ends at {_vector(t)}" for m, t in checks),
                "; ".join(f"{m} at {_vector(fig1[example][m]['final'])}" for m, _ in checks),
                _yes(len(held) == len(checks)),
            )
        )
    fig2 = _load(results, "fig2/fig2.json")
    rows.append(
        (
            "Fig. 2",
            "A² and Δ² stay bounded along training",
            f"A² ≤ {fig2['A_squared_upper_bound']:.3g}, Δ² ≥ {fig2['Delta_squared_lower_bound']:.3g}",
            _yes(fig2["A_squared_upper_bound"] < float("inf") and fig2["Delta_squared_lower_bound"] > 0),
        )
    )
    fig3 = _load(results, "fig3/fig3.json")["settings"]
    for name, row in fig3.items():
        fc = row["federated-clustering"]["final"]
        best = min(("local", "ifca-1", "global"), key=lambda m: row[m]["final"])
        rows.append(
            (
                f"Fig. 3, {name}",
                "Federated-Clustering below Local, IFCA and Global",
                f"FC {fc:.2g}, best baseline {best} {row[best]['final']:.2g}",
                _yes(fc < row[best]["final"]),
            )
        )
    clipping = _load(results, "clipping/clipping.json")["sigmas"]
    elbows = [r["elbow"] for r in clipping.values()]
    rows.append(
        (
            "§4.3",
            "l = 10 Threshold-Clustering iterations suffice",
            "elbow at l = " + (f"{min(elbows)}" if min(elbows) == max(elbows) else f"{min(elbows)}–{max(elbows)}"),
            _yes(max(elbows) <= 10),
        )
    )
    paper = _script("table1").PAPER
    for folder, profile in (("table1", "ours"), ("table1-paper", "paper's settings")):
        table = _load(results, f"{folder}/table1.json")
        tuning = _load(results, f"{folder}/tuning.json")["tuning"]
        for task, row in table.items():
            acc = {m: 100 * v["accuracy"] for m, v in row.items()}
            non_oracle = {m: a for m, a in acc.items() if m != "ground-truth"}
            top = max(non_oracle, key=non_oracle.get)
            verdicts = [v for claim, _, v in table1_orderings(tuning, task) if claim.startswith("FC >")]
            rows.append(
                (
                    f"Table 1, {task} ({profile})",
                    f"FC {paper[task]['federated-clustering'][0]:.1f}%, the best method but "
                    f"Ground-truth ({paper[task]['ground-truth'][0]:.1f}%)",
                    f"FC {acc['federated-clustering']:.1f}%, best non-oracle {top} {non_oracle[top]:.1f}%"
                    + (f", Ground-truth {acc['ground-truth']:.1f}%" if "ground-truth" in acc else "")
                    + f" (FC above each: {_verdict_counts(verdicts)})",
                    _ordering_holds(verdicts),
                )
            )
    if (results / "authors-table1" / "authors_table1.json").exists():
        shown, verdict = authors_claim(_load(results, "authors-table1/authors_table1.json"))
        rows.append(
            (
                "Table 1, private-label, side by side with the authors' code (same pool, run.sh's FC command)",
                f"FC {paper['private-label']['federated-clustering'][0]:.1f}% above Local "
                f"{paper['private-label']['local'][0]:.1f}%",
                shown,
                verdict,
            )
        )
    return rows


def _verdict_counts(verdicts) -> str:
    return ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))


def _ordering_holds(verdicts) -> str:
    """A claim made of orderings: yes when each holds, **no** when one fails, else within the seeds' spread."""
    if verdicts and all(v == "holds" for v in verdicts):
        return "yes"
    if "fails" in verdicts or not verdicts:
        return "**no**"
    if "one seed" in verdicts or "no finite seed pair" in verdicts:
        return "no verdict: fewer than two seeds where both are finite"
    return "within the seeds' spread"


def _srfca_rows(results):
    rows = []
    for folder, profile in (("srfca", "ours"), ("srfca-paper", "paper's settings")):
        if not (results / folder / "srfca.json").exists():
            continue
        out = _load(results, f"{folder}/srfca.json")
        for task, res in out["results"].items():
            if "srfca" not in res:  # a run of the other methods only (--methods) makes no claim about SR-FCA
                continue
            sr = res["srfca"]
            paper_acc = out["paper"]["accuracy"][task]
            ours = sr["test_accuracy"]["mean"]
            baselines = {m: res[m]["test_accuracy"]["mean"] for m in ("local", "global") if m in res}
            missing = [m for m in ("local", "global") if m not in res]
            verdicts = [v for claim, _, v in srfca_orderings(res, {m: paper_acc[m] for m in ("srfca", *baselines)})]
            clustered = sr["misclustering"]["mean"] == 0
            if not clustered:
                verdict = "**no**"
            elif missing:  # half a claim checked is no verdict on the claim
                verdict = f"not checked: {' and '.join(SRFCA_LABELS[m] for m in missing)} not run"
            else:
                verdict = _ordering_holds(verdicts)
            rows.append(
                (
                    f"Tables 1-2, {task} ({profile})",
                    f"SR-FCA {paper_acc['srfca']:.2f}%, misclustering 0, above Local and Global",
                    f"SR-FCA {_cell(ours, 100, '.1f')}%, misclustering "
                    f"{_cell(sr['misclustering']['mean'], 1, '.2g')}"
                    + "".join(
                        f"{'; ' if i == 0 else ', '}{m} {_cell(v, 100, '.1f')}%"
                        for i, (m, v) in enumerate(baselines.items())
                    )
                    + (f" (SR-FCA above each: {_verdict_counts(verdicts)})" if verdicts else ""),
                    verdict,
                )
            )
    if (results / "authors-srfca" / "authors_srfca.json").exists():
        found = _load(results, "authors-srfca/authors_srfca.json")
        shown, verdict = authors_srfca_claim(found)
        rows.append(
            (
                "Tables 1-2, inverted, side by side with the authors' code (same pool and sizes)",
                f"SR-FCA {found['paper']['srfca']:.2f}% above Global {found['paper']['global']:.2f}% and "
                f"IFCA {found['paper']['ifca']:.2f}%",
                shown,
                verdict,
            )
        )
    return rows


def _ghosh_rows(results):
    out = _load(results, "ghosh/ghosh.json")
    curves, ratios = out["fig2a"], out["fig2b"]["ratios"]
    robust_zero = all(max(t[-1] for t in curves[r]["trials"]) == 0 for r in ("KGM", "TKM"))
    rows = [
        (
            "Fig. 2a",
            "K-means stays far from 0 (near 0.4); K-geomedians and Trimmed K-means reach 0",
            f"K-means ends at {curves['KM']['mean'][-1]:.2f}; KGM {curves['KGM']['mean'][-1]:.2f}, TKM "
            f"{curves['TKM']['mean'][-1]:.2f}",
            _yes(robust_zero and curves["KM"]["mean"][-1] > 0.1),
        )
    ]
    tm_sm, km, fa = _ghosh_checks(ratios)
    rows += [
        (
            "Fig. 2b",
            "TM's error ≥ 29% below SM's under robust clustering",
            f"TM / SM ≤ {_cell(tm_sm, 1, '.2f')}",
            _yes(tm_sm is not None and tm_sm <= 0.71),
        ),
        (
            "Fig. 2b",
            "KM's error ≥ 53% above the robust rules'",
            f"smallest ratio {_cell(km, 1, '.2f')}",
            _yes(km is not None and km >= 1.53),
        ),
        (
            "Fig. 2b",
            "FA orders of magnitude worse than TM",
            f"TKM+FA / TKM+TM = {_cell(fa, 1, '.2f')}",
            _yes(fa is not None and fa >= 10),
        ),
    ]
    return rows


def _paired(study: dict, arm: str, reference: str) -> dict:
    """arm minus reference on the study's seeds: mean, the 95% paired t interval and the seeds it wins."""
    from scipy import stats

    per_seed = {r["arm"]: r["per_seed"] for r in study["table"]}
    d = [a - b for a, b in zip(per_seed[arm], per_seed[reference])]
    mean = statistics.fmean(d)
    half = stats.t.ppf(0.975, len(d) - 1) * statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("inf")
    return dict(mean=mean, low=mean - half, high=mean + half, wins=sum(x > 0 for x in d), n=len(d))


def _better(p: dict) -> str:
    """yes when the arm is better on every seed and its interval excludes 0; **no** when its mean is not
    better; else within the seeds' spread."""
    if p["mean"] <= 0:
        return "**no**"
    return "yes" if p["wins"] == p["n"] and p["low"] > 0 else "within the seeds' spread"


def _points(p: dict) -> str:
    return (
        f"{100 * p['mean']:+.1f} points [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}], better on "
        f"{p['wins']} of {p['n']} seeds"
    )


def _optimizer_rows(results):
    """The claims the fedavg-study checks, each where its arms ran (a quick run has only some of them)."""
    study = _load(results, "fedavg-study/study.json")
    arms = {r["arm"] for r in study["table"]}

    def have(*names):
        return all(n in arms for n in names)

    rows = []
    for e in (1, 5):
        base = f"fedavg[local_epochs={e}]"
        for name in ("fedadam", "fedyogi"):
            if have(f"{name}[local_epochs={e}]", base):
                p = _paired(study, f"{name}[local_epochs={e}]", base)
                rows.append(
                    (
                        f"Reddi et al. §5 (E = {e})",
                        f"an adaptive server ({name}) beats FedAvg on heterogeneous data",
                        f"{name} - fedavg: {_points(p)}",
                        _better(p),
                    )
                )
    pairs = [(f"scaffold[local_epochs={e}]", f"fedavg[local_epochs={e}]") for e in (1, 5)]
    if have(*pairs[1]):
        five = _paired(study, *pairs[1])
        rows.append(
            (
                "Karimireddy et al. §7 (E = 5)",
                "SCAFFOLD beats FedAvg under client heterogeneity",
                f"scaffold - fedavg: {_points(five)}",
                _better(five),
            )
        )
        if have(*pairs[0]):
            one = _paired(study, *pairs[0])
            rows.append(
                (
                    "Karimireddy et al. Table 3",
                    "SCAFFOLD's gain over FedAvg grows with the local epochs",
                    f"{100 * one['mean']:+.1f} points at E = 1, {100 * five['mean']:+.1f} at E = 5",
                    _yes(five["mean"] > one["mean"] > 0),
                )
            )
    if have("fedavg[local_epochs=5]", "fedavg[local_epochs=1]"):
        epochs = _paired(study, "fedavg[local_epochs=5]", "fedavg[local_epochs=1]")
        rows.append(
            (
                "McMahan et al. §3",
                "more local epochs reach a better model in the same rounds",
                f"fedavg E = 5 - E = 1: {_points(epochs)}",
                _better(epochs),
            )
        )
    return rows


def fedavg_study(results: pathlib.Path = RESULTS) -> str:
    """``reproduce.py --only fedavg-study --all``: the FedAvg family and Federated-Clustering on Dirichlet label
    mixes with log-normal sizes, from ``fedavg-study/study.json``."""
    study = _load(results, "fedavg-study/study.json")
    reference = study["arms"][0]["name"]
    paired = {p["arm"]: p for p in study["paired"]}
    lines = [
        f"| arm | final test accuracy (mean, {study['confidence']:.0%} t interval) | minus {reference} "
        "(paired) | better / equal / worse seeds |",
        "|---|---|---|---|",
    ]
    for row in study["table"]:
        p = paired.get(row["arm"])

        def span(low, high, sign=""):  # one seed: no interval
            return "" if low is None or high is None else f" [{100 * low:{sign}.2f}, {100 * high:{sign}.2f}]"

        diff = "—" if p is None else f"{100 * p['mean']:+.2f} points{span(p['low'], p['high'], '+')}"
        wins = "—" if p is None else f"{p['wins']} / {p['ties']} / {p['losses']}"
        lines.append(f"| {row['arm']} | {100 * row['mean']:.2f}%{span(row['low'], row['high'])} | {diff} | {wins} |")
    task = study["config"]["task_config"]
    options = study["config"]["options"][study["arms"][0]["algorithm"]]
    return (
        "\n".join(lines) + f"\n\n{task['clients_per_cluster']} clients of the offline MNIST pool "
        f"({task['dataset']}), `{task['partition']}` label mixes with log-normal sizes (sigma {task['size_sigma']:g}), "
        f"an MLP ({task['hidden']} hidden units), {study['config']['rounds']} rounds, client learning rate "
        f"{options['learning_rate']:g}, batch {options['batch_size']}, each algorithm at its registered defaults "
        f"(FedAdam / FedYogi server rate 0.01, FedProx mu 0.01), seeds {', '.join(map(str, study['seeds']))}; "
        f"{len(study['runs'])} runs, {study['seconds'] / 60:.0f} minutes on this machine (`python "
        "experiments/reproduce.py --only fedavg-study --all`, `experiments/results/fedavg-study/`).\n"
    )


def _ghosh_checks(ratios):
    """(the larger TM / SM error ratio under TKM and KGM, the smallest KM-to-robust ratio, TKM+FA / TKM+TM);
    None where a ratio is undefined (a zero or diverged denominator)."""

    def worst(names, pick):
        values = [ratios.get(n) for n in names]
        return None if any(v is None for v in values) else pick(values)

    tm_sm = worst(["TKM+SM / TKM+TM", "KGM+SM / KGM+TM"], lambda v: max(1 / x if x else float("inf") for x in v))
    km = worst(["KM+SM / TKM+TM", "KM+TM / TKM+TM", "KM+TM / KGM+TM"], min)
    return tm_sm, km, ratios.get("TKM+FA / TKM+TM")


def _byzantine_rows(results):
    """The thesis's Fig. 2.6: FC keeps its accuracy where FedAvg collapses, under each attack at beta = 0.5."""
    out = _load(results, "byzantine/byzantine.json")
    rows = []
    for attack, row in out["fig2.6"].items():
        fc = next((v["final_test_accuracy"] for m, v in row.items() if m.startswith("fc:")), None)
        fedavg = row["global"]["final_test_accuracy"]
        rows.append(
            (
                f"Fig. 2.6, {attack}",
                "Federated-Clustering keeps its accuracy while FedAvg collapses (β = 0.5)",
                f"FC {_cell(fc, 100, '.1f')}%, FedAvg {_cell(fedavg, 100, '.1f')}%",
                _yes(fc is not None and (fedavg is None or fc > fedavg + 0.2)),
            )
        )
    return rows


def _claims_rows(results, folder, name, label):
    claims = _load(results, f"{folder}/{name}")["claims"]
    rows = []
    for c in claims:
        prefix, _, text = c["claim"].partition(": ")
        short = text and len(prefix) < 30
        rows.append(
            (
                prefix if short else label,
                text if short else c["claim"],
                f"{c['seeds_holding']} of {c['seeds']} seeds" if "seeds" in c else f"`{folder}/summary.md`",
                _yes(c["holds"]),
            )
        )
    return rows


def results_vs_papers(results: pathlib.Path = RESULTS) -> str:
    """Every reproduced claim or number next to the paper's, with whether it holds, from the committed result
    files (one section per paper)."""
    sections = [
        (
            "Werner et al., Provably Personalized and Robust Federated Learning",
            "papers/werner.md",
            _werner_rows(results),
        ),
        ("SR-FCA (Vardhan et al.)", "papers/srfca.md", _srfca_rows(results)),
        ("Ghosh et al., the robust 3-stage method", "papers/ghosh.md", _ghosh_rows(results)),
        ("The thesis, ch. 2 (Byzantine clients)", "guides/byzantine.md", _byzantine_rows(results)),
        (
            "The thesis, ch. 3 (defection-free collaboration, learning rate 0.1)",
            "papers/thesis-incentives.md",
            _claims_rows(results, "defection_free", "defection_free.json", "§3.5"),
        ),
        (
            "The thesis, ch. 4 (price discrimination)",
            "papers/thesis-incentives.md",
            _claims_rows(results, "price_discrimination", "price_discrimination.json", "Figs. 4.2-4.5"),
        ),
        (
            "Federated optimizers: Reddi et al. 2021, Karimireddy et al. 2020, McMahan et al. 2017",
            "guides/federated-optimizers.md",
            _optimizer_rows(results),
        ),
    ]
    parts, held, spread, total = [], 0, 0, 0
    for title, page, rows in sections:
        held += sum(r[3] == "yes" for r in rows)
        spread += sum(r[3] == "within the seeds' spread" for r in rows)
        total += len(rows)
        parts.append(
            f"### {title}\n\n([details]({page}))\n\n| result | the paper | ours | holds |\n"
            "| --- | --- | --- | --- |\n" + "\n".join(f"| {' | '.join(r)} |" for r in rows) + "\n"
        )
    within = f", {spread} are within the seeds' spread" if spread else ""
    return f"**{held} of {total}** reproduced claims hold{within}.\n\n" + "\n".join(parts)


def pd_protocol_bench(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model pd-protocol``: Fig. 4.5's whole grid as one compiled program against a Python
    loop over rounds, from ``bench/pd_protocol.jsonl``."""
    rows = _jsonl(results, "bench/pd_protocol.jsonl")
    paired = next(r for r in rows if "speedup_vs_loop" in r)
    loop = next(r for r in rows if r["driver"] == "python-loop")
    full = max((r for r in rows if r["driver"] == "compiled-scan"), key=lambda r: r["rounds"])
    return (
        f"`fedjax-clust bench --model pd-protocol` ran the grid ({full['bias_intervals']} bias intervals × "
        f"{full['sellers']} sellers × {full['seeds']} seeds = {full['runs']} runs × {full['rounds']:,} rounds) as "
        f"one compiled program in {full['seconds']:.1f} s after a first call of {full['first_call_seconds']:.1f} s "
        f"(target: under a minute), {paired['speedup_vs_loop']:g}× faster than a Python loop over "
        f"{paired['rounds']} rounds calling the same jitted, vmapped round (largest difference of their outputs "
        f"{paired['max_abs_difference_vs_loop']:g}). A round of all {full['runs']} runs is about "
        f"{loop['round_flops'] / 1e6:.1f} MFLOP of scalar work and threefry hashing, far from any roof "
        "(`experiments/results/bench/pd_protocol.jsonl`).\n"
    )


def attack_switch_bench(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust --compile-cache off bench --model attack-switch``: one program switching over the attack kinds
    against a program per kind, from ``bench/attack_switch.jsonl``."""
    rows = [r for r in _jsonl(results, "bench/attack_switch.jsonl") if r.get("benchmark") == "attack-switch"]
    first = rows[0]
    lines = [
        "| algorithm | runs | programs | seconds (compile + the rest) | switched | ratio | largest relative "
        "difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        apart, together = r["per_kind"], r["switched"]
        lines.append(
            f"| {r['algorithm']}, {r['batching']} | {len(r['attacks']) * len(r['fractions'])} | "
            f"{apart['programs']} → {together['programs']} | {apart['seconds']:.1f} ({apart['compile_seconds']:.1f} + "
            f"{apart['run_seconds']:.1f}) | {together['seconds']:.1f} ({together['compile_seconds']:.1f} + "
            f"{together['run_seconds']:.1f}) | {r['ratio']:.2f} | {r['max_relative_difference']:.1g} |"
        )
    return (
        "\n".join(lines) + f"\n\nMedian of {first['repeats']} alternated pairs on the synthetic task "
        f"({first['clients']} clients, {first['rounds']} rounds, seed 0), attacks "
        f"{', '.join(first['attacks'])} at shares {', '.join(f'{b:g}' for b in first['fractions'])}, without "
        "the compilation cache (`experiments/results/bench/attack_switch.jsonl`).\n"
    )


def fedavg_bench(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model fedavg``: local training's rounds against the one-step Global round, from
    ``bench/fedavg.jsonl``."""
    rows = _jsonl(results, "bench/fedavg.jsonl")
    matmul = next(r for r in rows if r["benchmark"] == "matmul_f32")
    rounds = [r for r in rows if r["benchmark"] == "fedavg-round"]
    lines = [
        "| round | local steps | seconds | seconds / (steps × Global's) | chunked's speed-up |",
        "|---|---|---|---|---|",
    ]
    for r in rounds:
        name = (
            r["algorithm"].replace("fedavg-epoch", "fedavg, one epoch").replace("-all-at-once", ", all clients at once")
        )
        speedup = f"{r['chunk_speedup']:.2f}x" if "chunk_speedup" in r else ""
        lines.append(
            f"| {name} | {r['local_steps']} | {r['seconds_per_round']:.3f} | {r['per_step_ratio']:.2f} | {speedup} |"
        )
    first = rounds[0]
    return (
        "\n".join(lines) + f"\n\n{first['clients']:,} clients of the MNIST MLP, batch {first['batch_size']}, "
        f"medians of 5 timed calls after a warm-up (float32 matmul on this machine in the same run: "
        f"{matmul['gflops_per_s']:.0f} GFLOP/s; `experiments/results/bench/fedavg.jsonl`). The target: tau = 5 "
        'within 1.2x of 5 Global rounds. The other rows run with `client_chunk="auto"` (on a CPU, chunks of '
        "clients when a round takes 3 or more steps: the one-epoch round's 2 steps run all at once either way), "
        "the all-at-once rows with `client_chunk=None`.\n"
    )


def fedavg_peers(results: pathlib.Path = RESULTS) -> str:
    """``python experiments/fedavg_peers.py``: fedavg / fedavgm with local epochs against FedJAX's FedAvg, from
    ``fedavg-peers/fedavg_peers.json``."""
    found = _load(results, "fedavg-peers/fedavg_peers.json")
    lines = [
        "| case | clients | local steps | largest relative difference, round 1 / round "
        + str(found["rounds"])
        + " | seconds per round (ours / FedJAX) | speed-up |",
        "|---|---|---|---|---|---|",
    ]
    for r in found["cases"]:
        d, t = r["relative_difference"], r["seconds_per_round"]
        lines.append(
            f"| {r['case']} | {r['clients']:,} | {r['local_steps']} | {d['round1']:.1e} / "
            f"{d['round' + str(found['rounds'])]:.1e} | {t['fedjax-clust']:.4f} / {t['fedjax']:.4f} | "
            f"{r['speedup']:.1f}x |"
        )
    return (
        "\n".join(lines) + "\n\nThe MNIST MLP (784 → 32 → 10) on 8 offline images per client, every client in every "
        "round, batches in stored order on both sides (`skip_shuffle`), medians of rounds 2 and 3 on this "
        "machine (`python experiments/fedavg_peers.py --setup`, `experiments/results/fedavg-peers/`).\n"
    )


def flower_server(results: pathlib.Path = RESULTS) -> str:
    """``python experiments/flower_server_math.py``: our server optimisers against Flower's strategies on the
    same client models, from ``flower-server/flower_server.json``."""
    found = _load(results, "flower-server/flower_server.json")
    last = f"round{found['rounds']}"
    lines = [
        f"| Flower {found['versions']['flwr']} | its options | ours | mapped | largest relative difference, "
        f"round 1 / round {found['rounds']} |",
        "|---|---|---|---|---|",
    ]
    for r in found["rows"]:
        options = ", ".join(f"{k} {v:g}" for k, v in r["flower_options"].items()) or "defaults"
        d = r["relative_difference"]
        lines.append(
            f"| {r['strategy']} | {options} | {r['ours']} | {'yes' if r['mapped'] else 'no'} | "
            f"{d['round1']:.1e} / {d[last]:.1e} |"
        )
    return (
        "\n".join(lines) + f"\n\n{found['clients']} clients with unequal example counts, given models (not "
        f"trained), {found['rounds']} rounds, {found['dtype']} on both sides (`python "
        "experiments/flower_server_math.py --setup`, `experiments/results/flower-server/`).\n"
    )


AUTHORS_ARMS = {
    "authors": "authors' code, as published",
    "authors-fixed": "authors' code, fixed clients",
    "ours": "ours",
    "ours-torch-init": "ours, PyTorch's initial weights",
}
AUTHORS_METHODS = {
    "local": "Local",
    "global": "Global",
    "ground-truth": "Ground-truth",
    "ifca": "IFCA",
    "fc": "FC (run.sh's command)",
    "fc-profile": "FC (batch 32, 210 rounds, 10 steps)",
}


def _authors_seeds(runs: list, task: str, method: str, arm: str) -> list:
    """A cell's final accuracies (%) in seed order (None where a run diverged)."""
    return [
        r["accuracy"]
        for r in sorted(runs, key=lambda r: r["seed"])
        if (r["task"], r["method"], r["arm"]) == (task, method, arm)
    ]


def authors_orderings(found: dict, task: str, arm: str, fc: str = "fc") -> list:
    """(claim, paired difference, verdict) of the paper's orderings for one arm of the side-by-side run:
    Federated-Clustering (row ``fc``) above Local, Global and IFCA, Ground-truth above it; the methods of a seed
    share the seed (:func:`table1_orderings`' rule)."""
    from fedjax_clust.run.statistics import ordering_verdict, paired_difference

    runs, out = found["runs"], []
    pairs = [(fc, m) for m in ("local", "global", "ifca")] + [("ground-truth", fc)]
    label = {"fc": "FC", "fc-profile": "FC (profile)"}
    for a, b in pairs:
        x, y = _authors_seeds(runs, task, a, arm), _authors_seeds(runs, task, b, arm)
        if x and len(x) == len(y):
            diff = paired_difference(x, y, warn=False)
            out.append(
                (
                    f"{label.get(a, AUTHORS_METHODS[a])} > {label.get(b, AUTHORS_METHODS[b])}",
                    diff,
                    ordering_verdict(diff),
                )
            )
    return out


def authors_claim(found: dict, task: str = "private-label") -> tuple:
    """The side-by-side verdict on the paper's private-label claim (Federated-Clustering above Local), as
    (what ours shows, verdict): "yes" when ours holds it; "**no**: fails in the authors' code too" when their code
    with fixed clients (the federated setting ours simulates) does not hold it either (it fails there or is within
    the seeds' spread: the verdict quotes which); "**no**: ours differs in
    its initial weights" when theirs holds it and ours does only with PyTorch's initial weights; else
    "**no**: ours differs (not found)"."""

    def ordering(arm):
        return next(
            ((d, v) for claim, d, v in authors_orderings(found, task, arm) if claim == "FC > Local"), (None, None)
        )

    def holds(arm):
        return ordering(arm)[1] == "holds"

    def mean(method, arm):
        values = [v for v in _authors_seeds(found["runs"], task, method, arm) if v is not None]
        return sum(values) / len(values) if values else float("nan")

    shown = "; ".join(
        f"{AUTHORS_ARMS[arm]}: FC {mean('fc', arm):.1f}%, Local {mean('local', arm):.1f}%"
        for arm in AUTHORS_ARMS
        if _authors_seeds(found["runs"], task, "fc", arm)
    )
    if holds("ours"):
        return shown, "yes"
    if not holds("authors-fixed"):
        diff, verdict = ordering("authors-fixed")
        there = "" if diff is None else f" (there FC − Local {_difference_text(diff)}: {verdict})"
        return shown, f"**no**: fails in the authors' code too{there}"
    if holds("ours-torch-init"):
        return shown, "**no**: ours differs in its initial weights"
    return shown, "**no**: ours differs (not found)"


def authors_table1(results: pathlib.Path = RESULTS) -> str:
    """``python experiments/authors_table1.py``: Werner et al. Table 1 in the authors' code (as published and with
    fixed clients) and in ours on the same pool, every method's final test accuracy (mean and range over seeds),
    the paper's orderings per arm, what still differs, from ``authors-table1/authors_table1.json``."""
    found = _load(results, "authors-table1/authors_table1.json")
    summary, arms = found["summary"], [a for a in AUTHORS_ARMS if any(r["arm"] == a for r in found["runs"])]
    lines = [
        "| task | method | paper | " + " | ".join(AUTHORS_ARMS[a] for a in arms) + " |",
        "| --- | --- | --- |" + " --- |" * len(arms),
    ]
    for task, per_method in summary.items():
        for method, per_arm in per_method.items():
            cells = []
            for arm in arms:
                c = per_arm.get(arm)
                if c is None:
                    cells.append("not run")
                elif c["mean"] is None:
                    cells.append("div.")
                else:
                    spread = f" ({c['min']:.1f}–{c['max']:.1f})" if len(c["seeds"]) > 1 else ""
                    cells.append(f"{c['mean']:.1f}{spread}")
            lines.append(
                f"| {task} | {AUTHORS_METHODS[method]} | {found['paper'][task][method]:.1f} | "
                + " | ".join(cells)
                + " |"
            )
    seeds = len(found["seeds"])
    methods = found["methods"]
    caption = (
        f"\n\nFinal test accuracy %, mean over the clients and {seeds} seed{'s' * (seeds > 1)} (their range "
        f"in brackets); {found['clients']} clients ({found['clients'] // found['clusters']} per cluster) of "
        f"200 training and 50 test images from the offline pool, MLP-200, the probability loss, learning rate "
        f"{found['learning_rate']:g}, momentum {found['momentum']:g}; the baselines "
        f"{methods['local']['rounds']} rounds of batch {methods['local']['batch']}, FC (run.sh's command) "
        f"{methods['fc']['rounds']} full-batch rounds with {methods['fc']['options']['clustering_steps']} "
        "thresholding steps. The authors' code is liehe/PRFL at "
        f"{found['checkout_commit'][:7]} (`python experiments/authors_table1.py --setup --code PRFL`, "
        "`experiments/results/authors-table1/`).\n"
    )
    orderings = [
        "",
        "| task | ordering the paper reads | " + " | ".join(AUTHORS_ARMS[a] for a in arms) + " |",
        "| --- | --- |" + " --- |" * len(arms),
    ]
    for task in summary:
        for fc in ("fc", "fc-profile"):
            per_arm = {a: {claim: (d, v) for claim, d, v in authors_orderings(found, task, a, fc)} for a in arms}
            for claim in dict.fromkeys(c for a in arms for c in per_arm[a]):
                cells = [
                    f"{_difference_text(per_arm[a][claim][0])}: {per_arm[a][claim][1]}"
                    if claim in per_arm[a]
                    else "not run"
                    for a in arms
                ]
                orderings.append(f"| {task} | {claim} | " + " | ".join(cells) + " |")
    shown, verdict = authors_claim(found)
    differs = [f"- {d}" for d in found["differences"]]
    return (
        "\n".join(lines)
        + caption
        + "\n".join(orderings)
        + "\n\nAccuracy difference (points) [95% paired interval], seeds it wins: verdict.\n\n"
        + f"The private-label claim (FC above Local, run.sh's FC command): {verdict.replace('**', '')} "
        f"({shown}).\n\nWhat still differs between the two codes:\n\n" + "\n".join(differs) + "\n"
    )


SRFCA_SIDE_METHODS = {"srfca": "SR-FCA", "local": "Local", "global": "Global", "ifca": "IFCA"}


def authors_srfca_orderings(found: dict, arm: str) -> list:
    """(claim, paired difference, verdict) of SR-FCA above Local, Global and IFCA (the paper's inverted-MNIST
    table) in one arm of the side-by-side run; a seed's methods share the seed."""
    from fedjax_clust.run.statistics import ordering_verdict, paired_difference

    out = []
    for other in ("local", "global", "ifca"):
        x = _authors_seeds(found["runs"], "inverted", "srfca", arm)
        y = _authors_seeds(found["runs"], "inverted", other, arm)
        if x and len(x) == len(y):
            diff = paired_difference(x, y, warn=False)
            out.append((f"SR-FCA > {SRFCA_SIDE_METHODS[other]}", diff, ordering_verdict(diff)))
    return out


def authors_srfca_claim(found: dict) -> tuple:
    """(what both codes show, verdict) on the paper's claim that SR-FCA beats Global and IFCA on inverted MNIST:
    "yes" when both orderings hold in ours; "**no**: fails in the authors' code too" when either does not hold in
    theirs either (fails, or within the seeds' spread: the verdict quotes both); else "**no**: ours differs (not
    found)"."""

    def holds(arm):
        verdicts = {c: v for c, _, v in authors_srfca_orderings(found, arm)}
        return all(verdicts.get(c) == "holds" for c in ("SR-FCA > Global", "SR-FCA > IFCA"))

    summary = found["summary"]
    shown = "; ".join(
        f"{'authors' if arm == 'authors' else 'ours'}: "
        + ", ".join(f"{SRFCA_SIDE_METHODS[m]} {summary[m][arm]['mean']:.1f}%" for m in ("srfca", "global", "ifca"))
        for arm in ("authors", "ours")
    )
    if holds("ours"):
        return shown, "yes"
    if not holds("authors"):
        there = "; ".join(
            f"{claim} {_difference_text(d)}: {v}"
            for claim, d, v in authors_srfca_orderings(found, "authors")
            if claim in ("SR-FCA > Global", "SR-FCA > IFCA")
        )
        return shown, f"**no**: fails in the authors' code too (there {there})"
    return shown, "**no**: ours differs (not found)"


def authors_srfca(results: pathlib.Path = RESULTS) -> str:
    """``python experiments/authors_srfca.py``: SR-FCA's inverted-MNIST table in the SR-FCA authors' code and in
    ours on the same pool (mean and range over seeds, the paper's orderings per arm, what differs), from
    ``authors-srfca/authors_srfca.json``."""
    found = _load(results, "authors-srfca/authors_srfca.json")
    summary, arms = found["summary"], ("authors", "ours")
    names = {"authors": "the SR-FCA authors' code", "ours": "ours"}
    lines = ["| method | paper | " + " | ".join(names[a] for a in arms) + " |", "| --- | --- |" + " --- |" * len(arms)]
    for method, label in SRFCA_SIDE_METHODS.items():
        cells = []
        for arm in arms:
            c = summary.get(method, {}).get(arm)
            if c is None or c["mean"] is None:
                cells.append("–" if c is None else "div.")
                continue
            mis = [r.get("misclustering") for r in found["runs"] if (r["method"], r["arm"]) == (method, arm)]
            mis = [m for m in mis if m is not None]
            cells.append(
                f"{c['mean']:.1f} ({c['min']:.1f}–{c['max']:.1f})"
                + (f", misclustering {max(mis):g}" if mis and method != "global" else "")
            )
        lines.append(f"| {label} | {found['paper'][method]:.2f} | " + " | ".join(cells) + " |")
    seeds = len(found["seeds"])
    orderings = [
        "",
        "| ordering in the paper's table | " + " | ".join(names[a] for a in arms) + " |",
        "| --- |" + " --- |" * len(arms),
    ]
    per_arm = {a: {c: (d, v) for c, d, v in authors_srfca_orderings(found, a)} for a in arms}
    for claim in per_arm["authors"]:
        orderings.append(
            f"| {claim} | "
            + " | ".join(
                f"{_difference_text(per_arm[a][claim][0])}: {per_arm[a][claim][1]}" if claim in per_arm[a] else "–"
                for a in arms
            )
            + " |"
        )
    shown, verdict = authors_srfca_claim(found)
    return (
        "\n".join(lines)
        + f"\n\nFinal test accuracy % on inverted MNIST, mean over {seeds} seeds (their range in brackets; "
        "misclustering: the largest over seeds); "
        f"{found['clients']} clients ({found['clients'] // 2} per cluster) of 100 training and 25 test images "
        "from the offline pool, MLP-200, Adam at 2e-4, batch 50. The authors' code is harshv834/sr-fca at "
        f"{found['checkout_commit'][:7]} (`python experiments/authors_srfca.py --setup --code sr-fca`, "
        "`experiments/results/authors-srfca/`).\n"
        + "\n".join(orderings)
        + "\n\nAccuracy difference (points) [95% paired interval], seeds it wins: verdict.\n\n"
        f"The paper's claim (SR-FCA above Global and IFCA): {verdict.replace('**', '')} ({shown}).\n\n"
        "What still differs between the two codes:\n\n" + "\n".join(f"- {d}" for d in found["differences"]) + "\n"
    )


def _cell(value, scale: float = 1.0, digits: str = ".3g") -> str:
    return "div." if value is None else format(scale * value, digits)


def byzantine_fig2_6(results: pathlib.Path = RESULTS) -> str:
    """The thesis's Fig. 2.6: final honest test accuracy per attack and method (FC, FedAvg and FedAvg with every
    robust aggregator), from ``byzantine/byzantine.json``."""
    out = _load(results, "byzantine/byzantine.json")
    fig, settings = out["fig2.6"], out["settings"]
    methods = list(next(iter(fig.values())))
    lines = ["| attack | " + " | ".join(methods) + " |", "| --- |" + " --- |" * len(methods)]
    best = []
    for attack, row in fig.items():
        accs = {m: row[m]["final_test_accuracy"] for m in methods}
        top = max((m for m in methods if accs[m] is not None), key=lambda m: accs[m], default=None)
        best.append((attack, top))
        lines.append(
            f"| {attack} | "
            + " | ".join(
                f"**{_cell(accs[m], 100, '.1f')}%**"
                if m == top
                else ("div." if accs[m] is None else f"{100 * accs[m]:.1f}%")
                for m in methods
            )
            + " |"
        )
    return "\n".join(lines) + (
        f"\n\nFinal honest test accuracy; {settings['dataset']}, 4 clusters of {settings['honest_per_cluster']} honest "
        f"clients each joined by as many attackers (β = 0.5), MLP-{settings['hidden']}, lr {settings['lr']:g}, "
        "momentum "
        f"0.9, batch 32, {settings['rounds']} rounds, FC with q = {settings['fig_quantile']:g}. Best per attack: "
        + ", ".join(f"{a}: {m}" for a, m in best)
        + " (`experiments/results/byzantine/byzantine.json`).\n"
    )


# The two sweeps of ``byzantine.py``: where its results live, how a cell reads, and when a defence counts as broken.
_SWEEP_FILES = {"synthetic": "byzantine/byzantine.json", "image": "byzantine-image/byzantine.json"}
_IMAGE_DROP = 0.10  # an image-task defence breaks when honest accuracy falls 10 points below its attack-free value


def _sweep_cell(task: str, value) -> str:
    return _cell(value, 100, ".1f") if task == "image" else _cell(value, 1.0, ".3g")


def _broken(value, clean, task: str = "synthetic") -> bool:
    """A defence broke: every honest model non-finite; on the synthetic task the final error 10x its attack-free
    value (and above 1e-3, so that float noise at the optimum does not count); on the image task the final honest
    accuracy 10 points (``_IMAGE_DROP``) below its attack-free value."""
    if value is None:
        return True
    if clean is None:
        return False
    if task == "image":
        return value < clean - _IMAGE_DROP
    return value >= 10 * clean and value > 1e-3


def _sweep_table(results, task: str, method: str) -> str:
    path = _SWEEP_FILES[task]
    sweep = _load(results, path)["sweep"][task]["results"]
    betas = list(next(iter(sweep.values())))
    lines = ["| attack | " + " | ".join(f"β = {b}" for b in betas) + " |", "| --- |" + " --- |" * len(betas)]
    for attack, per_beta in sweep.items():
        if not any(method in row for row in per_beta.values()):
            continue
        clean = per_beta["0"].get(method) if "0" in per_beta else None
        cells = []
        for b in betas:
            if method not in per_beta[b]:
                cells.append("")
                continue
            v = per_beta[b][method]
            text = _sweep_cell(task, v)
            cells.append(f"**{text}**" if b != "0" and _broken(v, clean, task) else text)
        lines.append(f"| {attack} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n({method}; `experiments/results/{path}`.)\n"


def byzantine_image_sweep(results: pathlib.Path = RESULTS, method: str = "fc:q0.1") -> str:
    """The image sweep for one method: final honest test accuracy (%) per attack and beta (bold where it is 10
    points or more below its attack-free value, ``div.`` where every honest model went non-finite)."""
    return _sweep_table(results, "image", method)


def _breakdown_table(results, task: str) -> str:
    sweep = _load(results, _SWEEP_FILES[task])["sweep"][task]["results"]
    attacks = list(sweep)
    betas = list(next(iter(sweep.values())))
    methods = list(dict.fromkeys(m for per_beta in sweep.values() for row in per_beta.values() for m in row))
    lines = ["| method | " + " | ".join(attacks) + " |", "| --- |" + " --- |" * len(attacks)]
    for m in methods:
        cells = []
        for attack in attacks:
            per_beta = sweep[attack]
            if not any(m in row for row in per_beta.values()):
                cells.append("")
                continue
            clean = per_beta["0"].get(m) if "0" in per_beta else None
            broken = [b for b in betas if b != "0" and m in per_beta[b] and _broken(per_beta[b][m], clean, task)]
            cells.append(f"**{broken[0]}**" if broken else "—")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines), betas


def byzantine_image_breakdown(results: pathlib.Path = RESULTS) -> str:
    """Per method and attack of the image sweep, the smallest beta whose final honest test accuracy is 10 points
    or more below its attack-free value (or diverged)."""
    settings = _load(results, _SWEEP_FILES["image"])["settings"]
    table, betas = _breakdown_table(results, "image")
    return table + (
        f"\n\nThe smallest β (of {', '.join(betas)}) at which the final honest test accuracy is "
        f"{100 * _IMAGE_DROP:g} points or more below the method's attack-free accuracy, or every honest model went "
        f"non-finite; — : never. {settings['dataset']} with private labels, 4 clusters × "
        f"{settings['image_clients_per_cluster']} clients, a fraction β of every cluster attacking, MLP-"
        f"{settings['hidden']}, lr {settings['lr']:g}, momentum 0.9, batch 32, {settings['image_rounds']} rounds "
        "(`experiments/results/byzantine-image/byzantine.json`).\n"
    )


# The Byzantine study (``fedjax-clust study``, attack x beta x aggregator x seeds): its file and how it is read.
_STUDY_FILE = "byzantine-study/study.json"


def _study_seeds_broken(study: dict) -> dict:
    """{(arm, attack, beta): [whether each seed's run is broken]} (in the order of the study's runs; only any /
    all of a list are read): a run is broken at beta when it went non-finite or its final error is 10x the same
    arm's attack-free error on the same seed and above 1e-3 (``_broken``; never when the attack-free run itself
    went non-finite)."""
    finals = {
        (r["arm"], r["point"]["attack"], r["point"]["byzantine_fraction"], r["seed"]): r["final"] for r in study["runs"]
    }
    broken = {}
    for (arm, attack, beta, seed), value in finals.items():
        clean = finals.get((arm, attack, 0.0, seed))
        broken.setdefault((arm, attack, beta), []).append(beta != 0 and _broken(value, clean))
    return broken


def _study_axes(study: dict) -> tuple:
    attacks = list(dict.fromkeys(p["attack"] for p in study["points"]))
    betas = sorted({p["byzantine_fraction"] for p in study["points"]})
    return [a["name"] for a in study["arms"]], attacks, betas


def _study_settings(study: dict) -> str:
    config = study["config"]
    task, options = config["task_config"], config["options"][config["algorithms"][0]]
    return (
        f"Synthetic task, {task['num_clusters']} clusters × {task['clients_per_cluster']} clients, a fraction β "
        f"of every cluster attacking, lr {options['learning_rate']:g}, momentum {options['momentum']:g}, "
        f"{config['rounds']} rounds, seeds {', '.join(str(s) for s in study['seeds'])}"
    )


def byzantine_study_breakdown(results: pathlib.Path = RESULTS) -> str:
    """Per arm and attack of the Byzantine study, where the defence breaks, seed by seed: the smallest beta at
    which some seed's final error is 10x its attack-free value (or non-finite), and the smallest at which every
    seed's is (one number when they agree)."""
    study = _load(results, _STUDY_FILE)
    arms, attacks, betas = _study_axes(study)
    broken = _study_seeds_broken(study)
    lines = ["| arm | " + " | ".join(attacks) + " |", "| --- |" + " --- |" * len(attacks)]
    for arm in arms:
        cells = []
        for attack in attacks:
            some = next((b for b in betas if any(broken[(arm, attack, b)])), None)
            every = next((b for b in betas if all(broken[(arm, attack, b)])), None)
            if some is None:
                cells.append("—")
            elif some == every:
                cells.append(f"**{every:g}**")
            else:
                cells.append(f"{some:g} / " + ("—" if every is None else f"**{every:g}**"))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    n = len(study["seeds"])
    return "\n".join(lines) + (
        f"\n\nThe smallest β (of {', '.join(f'{b:g}' for b in betas)}) at which a seed's final honest mean "
        "‖x_i − x*‖² is at least 10× the same arm's attack-free value on that seed (and above 10⁻³), or its run "
        f'went non-finite. "some / **every**": the first β at which some of the {n} seeds breaks and the first at '
        "which every seed does (— : never every seed); one **β**: both at once; — alone: no seed ever. "
        f"{_study_settings(study)} (`experiments/results/{_STUDY_FILE}`).\n"
    )


def _per_seed(study: dict, arm: str) -> dict:
    """{(attack, beta): [final of each seed, None where the run went non-finite]} of one arm of the study."""
    rows = {
        (r["point"]["attack"], r["point"]["byzantine_fraction"]): r["per_seed"]
        for r in study["table"]
        if r["arm"] == arm
    }
    if not rows:
        raise KeyError(f"{arm!r} is not an arm of {_STUDY_FILE}")
    return rows


def byzantine_study_arm(results: pathlib.Path = RESULTS, arm: str = "federated-clustering[quantile=0.1]") -> str:
    """One arm of the Byzantine study: per attack and beta the median final honest error over the seeds and
    [their minimum, maximum], bold where every seed broke (``byzantine_study_breakdown``'s rule), the count of
    non-finite runs where there are some. The median and range rather than the study's mean and t interval:
    across seeds the error spans orders of magnitude (one seed's divergence is the whole mean), which is not
    the roughly normal spread a t interval assumes; ``study.md`` has the means and intervals."""
    study = _load(results, _STUDY_FILE)
    _, attacks, betas = _study_axes(study)
    broken = _study_seeds_broken(study)
    per_seed = _per_seed(study, arm)
    lines = ["| attack | " + " | ".join(f"β = {b:g}" for b in betas) + " |", "| --- |" + " --- |" * len(betas)]
    for attack in attacks:
        cells = []
        for beta in betas:
            values = per_seed[(attack, beta)]
            done = sorted(v for v in values if v is not None)
            text = "div." if not done else _cell(statistics.median(done))
            if len(done) > 1:
                text += f" [{_cell(done[0])}, {_cell(done[-1])}]"
            if len(done) < len(values):
                text += f" ({len(values) - len(done)} div.)"
            cells.append(f"**{text}**" if all(broken[(arm, attack, beta)]) else text)
        lines.append(f"| {attack} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + (
        f"\n\n({arm}: the median over the seeds that finished, of {len(study['seeds'])}, [the smallest, the "
        "largest]; bold: every seed broke, as in the breakdown table; "
        f"`experiments/results/{_STUDY_FILE}`, whose `study.md` has the means and t intervals.)\n"
    )


def byzantine_study_paired(results: pathlib.Path = RESULTS, arm: str = "ground-truth[aggregator=median]") -> str:
    """The Byzantine study's arm against the reference (its first arm), seed by seed: per attack and beta the
    median over the seeds of the ratio arm / reference of the final errors, and on how many seeds the
    reference's error was lower (of the seeds on which both runs finished). A ratio, because the error spans
    orders of magnitude across seeds (a difference is one seed's)."""
    study = _load(results, _STUDY_FILE)
    _, attacks, betas = _study_axes(study)
    reference = study["arms"][0]["name"]
    ours, theirs = _per_seed(study, reference), _per_seed(study, arm)
    lines = ["| attack | " + " | ".join(f"β = {b:g}" for b in betas) + " |", "| --- |" + " --- |" * len(betas)]
    for attack in attacks:
        cells = []
        for beta in betas:
            pairs = [
                (a, b)
                for a, b in zip(theirs[(attack, beta)], ours[(attack, beta)])
                if a is not None and b is not None and b > 0
            ]
            if not pairs:
                cells.append("—")
                continue
            ratio = statistics.median(a / b for a, b in pairs)
            cells.append(f"×{_cell(ratio)}, {sum(b < a for a, b in pairs)}/{len(pairs)}")
        lines.append(f"| {attack} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + (
        f"\n\n{arm} over {reference}: the median over the seeds of the ratio of their final honest mean "
        f"‖x_i − x*‖² (above 1: {reference} lower), then the seeds on which {reference} was lower, of those where "
        f"both runs finished (`experiments/results/{_STUDY_FILE}`; `study.md` has the paired-t intervals of the "
        "differences).\n"
    )


def byzantine_ball_edge(results: pathlib.Path = RESULTS) -> str:
    """The ball-edge attack (Federated-Clustering only, so outside the study's shared grid) from ``byzantine.py``'s
    synthetic sweep: each FC quantile's final honest error per beta (one seed), bold where it is broken."""
    out = _load(results, _SWEEP_FILES["synthetic"])
    per_beta = out["sweep"]["synthetic"]["results"]["ball-edge"]
    betas = list(per_beta)
    methods = [m for m in per_beta[betas[0]] if m.startswith("fc:")]
    lines = ["| method | " + " | ".join(f"β = {b}" for b in betas) + " |", "| --- |" + " --- |" * len(betas)]
    for m in methods:
        clean = per_beta["0"][m]
        cells = [_cell(per_beta[b][m]) for b in betas]
        cells = [f"**{c}**" if b != "0" and _broken(per_beta[b][m], clean) else c for b, c in zip(betas, cells)]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + (
        f"\n\nFinal honest mean ‖x_i − x*‖², seed {out['settings']['seed']}, bold where 10× the attack-free value "
        f"or more (and above 10⁻³), div. where every honest model went non-finite "
        f"(`experiments/results/{_SWEEP_FILES['synthetic']}`).\n"
    )


ROBUST_LABELS = {
    "mean": "mean (a matrix-vector product over the finite rows)",
    "krum": "Krum (an N × N Gram matrix)",
    "multi-krum": "multi-Krum",
    "geometric-median": "geometric median (Weiszfeld steps to the tolerance)",
    "median": "coordinate median (selection)",
    "centered-clipping": "centered clipping (from the median)",
    "trimmed-mean": "trimmed mean (two selections)",
    "median-by-sort": "coordinate median by a full sort (reference)",
}


def bench_robust(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model robust``: every aggregator against the mean, the order-statistic engines
    and the attacked FC round, all from one run (``bench/robust.jsonl``)."""
    rows = _jsonl(results, "bench/robust.jsonl")
    aggregators = [r for r in rows if r["benchmark"] == "aggregator"]
    first = aggregators[0]
    lines = ["| aggregator | seconds | × mean |", "| --- | --- | --- |"]
    lines += [
        f"| {ROBUST_LABELS.get(r['aggregator'], r['aggregator'])} | {r['seconds']:.3g} | {r['ratio_to_mean']:g} |"
        for r in aggregators
    ]
    for r in rows:
        if r["benchmark"] == "order-statistic":
            lines.append(
                f"| the median's order statistic alone, engine `{r['select']}` | {r['seconds']:.3g} | "
                f"{r['ratio_to_mean']:g} |"
            )
    sort = next((r for r in aggregators if "selection_speedup" in r), None)
    rounds = [r for r in rows if r["benchmark"] == "attacked-round"]
    text = (
        f"\n\nN = {first['messages']} messages of d = {first['dim']:,} float32, one run "
        "(`experiments/results/bench/robust.jsonl`; ratios within that run)."
    )
    if sort:
        text += f" The selection makes the median {sort['selection_speedup']:g}× faster than the sort."
    clean = next((r for r in rounds if r["attack"] is None), None)
    attacked = next((r for r in rounds if r["attack"] is not None), None)
    if clean is not None and attacked is not None:
        text += (
            f" An FC round at N = {clean['clients']} took {1e3 * attacked['seconds_per_round']:.3g} ms with "
            f"{100 * attacked['byzantine_fraction']:g}% {attacked['attack']} attackers against "
            f"{1e3 * clean['seconds_per_round']:.3g} ms without ({attacked['ratio_to_clean']:g}×)."
        )
    return "\n".join(lines) + text + "\n"


def bench_mlp(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model mlp`` at B = 32 and B = 8: the cross-gradient kernel and the full FC round,
    their counted FLOPs and the rate against the matmul read around each timing (``bench/mlp*.jsonl``)."""
    lines = None
    for path in ("bench/mlp.jsonl", "bench/mlp_b8.jsonl"):
        for r in _jsonl(results, path):
            if not r["benchmark"].startswith("mlp-"):
                continue
            if lines is None:
                lines = [
                    f"| N = {r['clients']}, G = {r['subgroups']}, {r['params']:,} parameters | seconds per "
                    "round | GFLOP per round | GFLOP/s | matmul GFLOP/s | fraction |",
                    "| --- | --- | --- | --- | --- | --- |",
                ]
            what = (
                "cross-gradient kernel" if r["clustering_steps"] == 0 else f"full round ({r['clustering_steps']} steps)"
            )
            lines.append(
                f"| B = {r['batch_size']}, {what}, {r['devices']} device{'s' * (r['devices'] > 1)} | "
                f"{r['seconds_per_round']:.3g} | {r['flops_per_round'] / 1e9:,.4g} | {r['gflops_per_s']:.3g} | "
                f"{r['matmul_gflops_per_s']:.4g} | **{100 * r['fraction_of_matmul']:.1f}%** |"
            )
    if lines is None:
        raise ValueError("bench/mlp.jsonl and mlp_b8.jsonl hold no timed row")
    return "\n".join(lines) + (
        "\n\n(`experiments/results/bench/mlp.jsonl` and `mlp_b8.jsonl`; one run each on "
        "the shared 2-core CPU: the matmul rate is read just before and after each timing.)\n"
    )


def bench_cnn(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model cnn``: one FC round on MNIST with the CNN at the paper's N = 300 and the
    vmapped round against a per-client loop (``bench/cnn.jsonl``)."""
    rows = _jsonl(results, "bench/cnn.jsonl")
    lines = [
        "| configuration | seconds per round | GFLOP/s | of the matmul rate read around it | peak memory |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r["benchmark"] in ("images-cross-gradients", "images-federated-clustering"):
            what = (
                f"cross-gradients only (N = {r['clients']}, G = {r['subgroups']})"
                if r["clustering_steps"] == 0
                else f"full FC round (+ {r['clustering_steps']} clustering steps)"
            )
            lines.append(
                f"| {what} | {r['seconds_per_round']:.3g} | {r['gflops_per_s']:.3g} | "
                f"{100 * r['fraction_of_matmul']:.0f}% of {r['matmul_gflops_per_s']:.0f} GFLOP/s | "
                f"{r['peak_bytes'] / 1e9:.1f} GB |"
            )
        elif r["benchmark"] == "images-federated-clustering-loop":
            lines.append(
                f"| N = {r['clients']}, one group: vmapped round / per-client Python loop of jitted pair "
                f"gradients | {r['seconds_per_round_vmapped']:.3g} / {r['seconds_per_round_python_loop']:.3g} "
                f"| | {r['speedup_vmapped_vs_loop']:g}× speedup | |"
            )
    first = next(r for r in rows if "pair_gradient_flops" in r)
    return "\n".join(lines) + (
        f"\n\n{first['params']:,} parameters, {first['pair_gradient_flops'] / 1e6:.1f} MFLOP "
        "per client-pair gradient by XLA's cost analysis (`experiments/results/bench/cnn.jsonl`; "
        "one run on the shared 2-core CPU).\n"
    )


def _ms(seconds) -> str:
    if seconds is None:
        return ""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    return f"{1e3 * seconds:.3g} ms" if seconds >= 1e-3 else f"{1e6 * seconds:.3g} µs"


def bench_scale(results: pathlib.Path = RESULTS, path: str = "bench/linear_scale.jsonl") -> str:
    """``fedjax-clust bench --clients 300,1000`` (or the large-N runs in subgroups, ``path``): every algorithm's
    round launched from Python / fused, per N."""
    rows = _jsonl(results, path)
    reference = next(r for r in rows if r.get("benchmark") == "reference")
    timed = [r for r in rows if "algorithm" in r and r.get("implementation") != "python-pair-loop"]
    sizes = list(dict.fromkeys(r["clients"] for r in timed))
    labels = {}
    for r in timed:
        label = r["algorithm"]
        if label == "federated-clustering":
            select = f", `{r['quantile_select']}`" if "quantile_select" in r else ""
            groups = f", G = {r['subgroups']}" if r.get("subgroups", 1) > 1 else ""
            label += f" ({r['radius_rule']}{select}{groups}, {r['devices']} device{'s' * (r['devices'] > 1)})"
        labels.setdefault(label, {})[r["clients"]] = r
    lines = [
        "| round (synthetic task, d = 10, 10 clustering steps) | " + " | ".join(f"N = {n:,}" for n in sizes) + " |",
        "| --- |" + " --- |" * len(sizes),
    ]
    for label, per_n in labels.items():
        lines.append(
            f"| {label} | "
            + " | ".join(
                f"{_ms(per_n[n]['seconds_per_round'])} / {_ms(per_n[n].get('fused_seconds_per_round'))}"
                if n in per_n
                else ""
                for n in sizes
            )
            + " |"
        )
    per_call = sorted({r["fused_rounds_per_call"] for r in timed if r.get("fused_rounds_per_call")})
    calls = f"{per_call[0]}" if len(per_call) == 1 else f"{per_call[0]}–{per_call[-1]}"
    return (
        "\n".join(lines)
        + _devices_sentence(timed)
        + (
            f"\n\nSeconds per round launched from Python / fused (rounds run as one compiled loop, as between two "
            f"evaluations of a run; {calls} round{'s' * (per_call[-1] > 1)} per timed call here); float32 matmul "
            f"{reference['matmul_gflops_per_s']:g} GFLOP/s and copy "
            f"{reference['copy_gbytes_per_s']:g} GB/s in the same run (`experiments/results/{path}`).\n"
        )
    )


def _devices_sentence(timed) -> str:
    """The same Federated-Clustering round on several devices against one, paired by N and radius rule (the
    ratios of one run), or nothing when the file times one device count."""
    one = {
        (r["clients"], r["radius_rule"], r.get("quantile_select")): r
        for r in timed
        if r["algorithm"] == "federated-clustering" and r["devices"] == 1
    }
    pairs = [
        (r, one[(r["clients"], r["radius_rule"], r.get("quantile_select"))])
        for r in timed
        if r["algorithm"] == "federated-clustering"
        and r["devices"] > 1
        and (r["clients"], r["radius_rule"], r.get("quantile_select")) in one
    ]
    if not pairs:
        return ""
    several_n = len({r["clients"] for r, _ in pairs}) > 1
    parts = [
        f"{'N = ' + format(r['clients'], ',') + ', ' if several_n else ''}"
        f"{r['radius_rule']}{', ' + r['quantile_select'] if r.get('quantile_select') else ''}: "
        + _times(single["seconds_per_round"] / r["seconds_per_round"], "faster", "slower")
        for r, single in pairs
    ]
    return f"\n\nOn {pairs[0][0]['devices']} devices against one, launched from Python: " + "; ".join(parts) + "."


def _span(values, digits: str) -> str:
    low, high = format(min(values), digits), format(max(values), digits)
    return low if low == high else f"{low}–{high}"


def profile_table(results: pathlib.Path = RESULTS, path: str = "profile") -> str:
    """``fedjax-clust profile``: seconds per round against N per algorithm, the fitted exponents, the
    calibration of the cost model and the per-client loop's speed-ups (``<path>/profile.json``)."""
    from fedjax_clust.bench.profile import BRANCH_SHARE

    out = _load(results, f"{path}/profile.json")
    rows = out["rows"]
    sizes = list(dict.fromkeys(r["clients"] for r in rows))
    algorithms = list(dict.fromkeys(r["algorithm"] for r in rows))
    cell = {(r["algorithm"], r["clients"]): r for r in rows}
    lines = ["| N | " + " | ".join(algorithms) + " |", "| --- |" + " --- |" * len(algorithms)]
    for n in sizes:
        lines.append(
            f"| {n:,} | "
            + " | ".join(_ms(cell[(a, n)]["seconds_per_round"]) if (a, n) in cell else "" for a in algorithms)
            + " |"
        )
    exponents = out["exponents"]
    fitted = {a: e["time"] for a, e in exponents.items() if e["time"] is not None}
    flat = [a for a, e in exponents.items() if e["time"] is None]
    text = " Time exponents, fitted over the rows above the launch floor (three at least): " + (
        ", ".join(f"{a} N^{e:.2f}" for a, e in fitted.items()) if fitted else "none"
    )
    if flat:
        text += f"; flat (at the launch floor): {', '.join(flat)}"
    sizes_ = [e["bytes"] for e in exponents.values() if e["bytes"] is not None and e["bytes"] == e["bytes"]]
    if sizes_:
        text += f". Communicated bytes ∝ N^{_span(sizes_, '.2f')}"
    text += "."
    c = out.get("calibration")
    if c:
        text += (
            f" Cost model calibrated in the same run: {c['compute_efficiency']:.3g} of the "
            f"{c['matmul_flops_per_s'] / 1e9:.0f} GFLOP/s matmul, {c['memory_efficiency']:.3g} of the "
            f"{c['copy_bytes_per_s'] / 1e9:.0f} GB/s copy, a launch of {_ms(c['launch_seconds'])} and "
            f"{c['kernel_seconds'] * 1e9:.0f} ns a kernel; {out['rows_within_2x']} of the "
            f"{out['judged_rows']} rows above the floor (data-dependent branches at most {BRANCH_SHARE:.0%} of the "
            "count) "
            "lie within "
            "[0.5, 2] of "
            "their projection."
        )
    loops = out.get("loop_speedups") or []
    if loops:
        text += (
            " The per-client Python loop (jitted per-pair gradients) against the vmapped round: "
            + ", ".join(
                f"{loop['loop_seconds']:.3g} s vs {_ms(loop['vmapped_seconds'])} at N = {loop['clients']} "
                f"({loop['speedup']:,.0f}×)"
                for loop in loops
            )
            + "."
        )
    return "\n".join(lines) + "\n\nSeconds per round." + text + f" (`experiments/results/{path}/profile.json`.)\n"


def profile_calibration(results: pathlib.Path = RESULTS, path: str = "profile") -> str:
    """Per algorithm, measured over projected seconds (``<path>/profile.json``): the range over the rows above
    the launch floor, and what the count left open (data-dependent loops, branches counted at their costliest)."""
    from fedjax_clust.bench.profile import BRANCH_SHARE

    out = _load(results, f"{path}/profile.json")
    rows = out["rows"]
    lines = [
        "| algorithm | rows above the floor | measured / projected there | at the floor | counted once |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in dict.fromkeys(r["algorithm"] for r in rows):
        mine = [r for r in rows if r["algorithm"] == name]
        above = [r["ratio"] for r in mine if r["above_floor"]]
        below = [r["ratio"] for r in mine if not r["above_floor"]]
        notes = []
        if any(r["open_loops"] for r in mine):
            notes.append(f"{max(r['open_loops'] for r in mine)} data-dependent loop(s)")
        if any(r["branches"] for r in mine):
            share = max(r.get("branch_share", 1.0) for r in mine)
            judged = "" if share <= BRANCH_SHARE else ": not judged"
            notes.append(
                f"{max(r['branches'] for r in mine)} branch(es) at their costliest, up to "
                f"{100 * share:.0f}% of the count{judged}"
            )
        lines.append(
            f"| {name} | {len(above)} of {len(mine)} | {_span(above, '.2f') if above else ''} | "
            f"{_span(below, '.2f') if below else ''} | {'; '.join(notes)} |"
        )
    return "\n".join(lines) + f"\n\n(`experiments/results/{path}/profile.json`.)\n"


def device_efficiency_table(results: pathlib.Path = RESULTS) -> str:
    """The efficiency the committed accelerator reports' rounds reached, counted here and fitted
    (``device-efficiency/<device>.json``): the measured end of every device projection."""
    fits = _load(results, "device-efficiency/measured_efficiency.json")["fits"]
    lines = [
        "| report | FP32 peak share | counted bytes' share of the bandwidth | launch | a kernel | "
        "rounds within [0.5, 2] (measured / projected) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for fit in fits:
        rows = _load(results, f"device-efficiency/{fit['file']}")["rows"]
        e = fit["efficiency"]
        ratios = [r["ratio"] for r in rows]
        lines.append(
            f"| {fit['label']}, {fit['date']} | {e['compute']:.3g} | {e['memory']:.3g} | "
            f"{_ms(e['launch'])} | {e['kernel'] * 1e9:.0f} ns | {fit['rows_within_2x']} of {len(rows)} "
            f"({_span(ratios, '.2f')}) |"
        )
    return "\n".join(lines) + "\n\n(`experiments/results/device-efficiency/`.)\n"


def _n(n) -> str:
    return "never" if n is None else f"{n:,.3g}" if n >= 1e6 else f"{n:,.0f}"


def device_projection_table(
    results: pathlib.Path = RESULTS, path: str = "profile", algorithm: str = "federated-clustering"
) -> str:
    """A profile's projections onto the registered devices for one algorithm (``<path>/devices.json``): the
    datasheet peaks, the N at which a round takes one second (slow end – fast end), the N at which its memory is
    full, and the seconds at N = 100,000."""
    out = _load(results, f"{path}/devices.json")
    summary = {s["device"]: s for s in out["summary"] if s["algorithm"] == algorithm}
    at = {r["device"]: r for r in out["rows"] if r["algorithm"] == algorithm and r["clients"] == 100_000}
    lines = [
        "| device (projection) | float32 FLOP/s | memory bandwidth | memory | N at 1 s a round | "
        "N at full memory | seconds at N = 100,000 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in summary.items():
        e = out["efficiencies"][name]
        row = at.get(name)
        seconds = (
            ""
            if row is None
            else (
                f"{_ms(row['seconds_low'])} – {_ms(row['seconds_high'])}"
                + ("" if row["fits_memory"] is not False else " (does not fit)")
            )
        )
        memory = "unknown" if e["memory"] >= 1e30 else f"{e['memory'] / 1e9:.0f} GB"
        limit = s["n_memory_limit"]
        ends = [s["n_one_second_low"], s["n_one_second_high"]]
        beyond = [limit is not None and (n is None or n > limit) for n in ends]
        one = (
            "memory binds first"
            if all(beyond)
            else " – ".join("beyond memory" if b else _n(n) for n, b in zip(ends, beyond))
        )
        borrowed = (
            e["measured"].get("basis", "").startswith(("measured: rounds of", "borrowed"))
            and f"the {e['label']} report" not in e["measured"]["basis"]
        )
        lines.append(
            f"| {e['label']}{' †' if borrowed else ''} | {e['flops'] / 1e12:.3g} T | "
            f"{e['bandwidth'] / 1e9:,.0f} GB/s | {memory} | {one} | {_n(limit)} | {seconds} |"
        )
    first = next(iter(summary.values()))
    caveat = first["caveat"]
    note = f" The profiled program has {caveat}." if caveat else ""
    from fedjax_clust.bench.device_projection import fit_flags

    grid = sorted({r["clients"] for r in _load(results, f"{path}/profile.json")["rows"] if r["algorithm"] == algorithm})
    flags = fit_flags(first["cost_residual"], first["memory_residual"])
    note += (
        f" Fitted to the profile's N = {grid[0]:,} – {grid[-1]:,}"
        + (
            f": {'; '.join(flags)}, so the N at full "
            "memory is a rough guide, and a profile over other sizes or on another machine moves it"
            if flags
            else ""
        )
        + ". † the measured end borrows the efficiency of another device's report (none was measured on it)."
    )
    measured = []
    for report in sorted((results / "accelerator").glob("*/*/report.json")):
        data = _load(results, str(report.relative_to(results)))
        full = [r for r in data["rows"] if r["name"] == "fc-full-n2" and r.get("measured") is not None]
        if full and algorithm == "federated-clustering":
            measured.append(
                f"{data['device']['kind']} ({data['date']}): "
                + ", ".join(f"{_ms(r['measured'])} ({r['rule']})" for r in full if r.get("rule"))
            )
    if measured:
        note += (
            " Measured at N = 100,000 by the committed accelerator reports, with a GPU's radix select: "
            + "; ".join(m for m in measured if not m.endswith(": "))
            + "."
        )
    return (
        "\n".join(lines) + f"\n\n{algorithm}, projected from `experiments/results/{path}/devices.json`: ranges "
        "between the stated efficiency and the one the committed accelerator reports measured." + note + "\n"
    )


def _bytes(n) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.3g} B"


def network_table(results: pathlib.Path = RESULTS, path: str = "network") -> str:
    """``fedjax-clust network``: per algorithm, a client's traffic and the round's wall time over the network at
    two N, and the time to target where its run reached it (``<path>/network.json``)."""
    out = _load(results, f"{path}/network.json")
    rows, a = out["rows"], out["assumptions"]
    a_runs = a["runs_clients"]  # the algorithms with a run; the others are in network.csv
    sizes = sorted({r["clients"] for r in rows})
    picks = [n for n in (4096, 100_000) if n in sizes] or sizes[-2:]
    lines = [
        "| algorithm | "
        + " | ".join(f"N = {n:,}: a client down / up, round wall time, time to target" for n in picks)
        + " |",
        "| --- |" + " --- |" * len(picks),
    ]

    def span(low, high):
        return _ms(low) if _ms(low) == _ms(high) else f"{_ms(low)} – {_ms(high)}"

    for name in [a for a in dict.fromkeys(r["algorithm"] for r in rows) if a in a_runs]:
        cells = []
        for n in picks:
            r = next((r for r in rows if r["algorithm"] == name and r["clients"] == n), None)
            if r is None:
                cells.append("(does not fit the server device)")
                continue
            target = (
                "not reached in its run"
                if r["rounds_to_target"] is None
                else f"{span(r['time_to_target_low'], r['time_to_target_high'])} ({r['rounds_to_target']} rounds)"
            )
            cells.append(
                f"{_bytes(r['client_down_bytes'])} / {_bytes(r['client_up_bytes'])}, "
                f"{span(r['round_seconds_low'], r['round_seconds_high'])}, {target}"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return (
        "\n".join(lines) + f"\n\nProjections: network {a['network']} ({a['network_description']}); server "
        f"{a['server']}; {a['examples_per_pass']} examples a pass; target {a['metric']} <= {a['target']:g} "
        f"with the rounds of the runs in `{a['runs']}` (N = "
        + ", ".join(f"{v:,}" for v in sorted(set(a["runs_clients"].values())))
        + f"); the algorithms without a run are in `network.csv`. (`experiments/results/{path}/network.json`.)\n"
    )


def peers_table(results: pathlib.Path = RESULTS) -> str:
    """``experiments/peers.py``: the same FedAvg round in fedjax-clust and each peer, the peer's time over ours per
    round and end to end, the round-1 agreement, and what each peer ran with (``peers/results.json``)."""
    out = _load(results, "peers/results.json")
    rows, env = out["rows"], out["environment"]
    others = list(dict.fromkeys(r["peer"] for r in rows if r["peer"] != "fedjax-clust"))
    ours = {(r["task"], r["clients"], r["cohort"]): r for r in rows if r["peer"] == "fedjax-clust"}
    head = [
        "task",
        "N",
        "cohort",
        "ours a round",
        *[f"{p} a round" for p in others],
        "ours end to end",
        *[f"{p} end to end" for p in others],
        "round-1 agreement",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def ratio(r, mine, column):
        if r is None:
            return ""
        if r["status"] != "ok":
            return r["status"]
        return f"{r[column] / mine[column]:,.0f}×" if r[column] >= mine[column] else f"{r[column] / mine[column]:.2g}×"

    for key, mine in ours.items():
        theirs = {
            p: next((r for r in rows if r["peer"] == p and (r["task"], r["clients"], r["cohort"]) == key), None)
            for p in others
        }
        agree = [f"{p} {r['agreement']:.0e}" for p, r in theirs.items() if r and r.get("agreement") is not None]
        cells = [
            key[0],
            f"{key[1]:,}",
            "all" if key[2] == key[1] else f"{key[2]:,}",
            _ms(mine["round_seconds"]),
            *[ratio(theirs[p], mine, "round_seconds") for p in others],
            _ms(mine["end_to_end_seconds"]),
            *[ratio(theirs[p], mine, "end_to_end_seconds") for p in others],
            ", ".join(agree) if agree else "(own cohorts)",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    for p in ["fedjax-clust", *others]:
        r = next(r for r in rows if r["peer"] == p and r["status"] == "ok")
        versions = ", ".join(f"{k} {v}" for k, v in r["versions"].items())
        notes.append(f"- **{p}** ({versions}): {r['interface']}; {r['resources']}.")
    return (
        "\n".join(lines) + f"\n\nA peer's seconds over fedjax-clust's in the same case (above 1: fedjax-clust "
        f"faster). A round: the median of the rounds after the first ({env['rounds']} rounds a run; for "
        "fedjax-clust their mean, as `simulate` reports it); end to "
        "end: from the process's start (imports, data, building, workers) through every round. Round-1 "
        "agreement: the largest difference of the peer's model after round 1 from ours, relative to its "
        f"largest entry (cohorts are each framework's own draws). {env['cpus']} CPU cores, Python "
        f"{env['python']}, {env['date']}.\n\n" + "\n".join(notes) + "\n\n(`experiments/results/peers/results.json`.)\n"
    )


def subgroups_table(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust profile``'s subgroup trade-off: FC's error and time per G (``profile/subgroups.csv``)."""
    import csv

    with open(results / "profile" / "subgroups.csv") as f:
        rows = list(csv.DictReader(f))
    lines = [
        "| G | group size | seconds per round | mean ‖x_i − x*_i‖² after training | bytes per round (cost model) |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['subgroups']} | {r['group_size']} | {_ms(float(r['seconds_per_round']))} | "
        f"{float(r['mean_sq_dist_to_optimum']):.2g} | {int(r['comm_bytes']) / 1e6:.3g} MB |"
        for r in rows
    ]
    return "\n".join(lines) + (
        f"\n\n(N = {rows[0]['clients']}, {rows[0]['rounds']} rounds; `experiments/results/profile/subgroups.csv`.)\n"
    )


def bench_participation(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model participation``: FC's round with a fraction f of the clients, time and
    compiled bytes against the full round of the same run (``bench/participation.jsonl``)."""
    rows = [r for r in _jsonl(results, "bench/participation.jsonl") if r["algorithm"] == "federated-clustering"]
    lines = [
        "| f | S | FC s/round | FC time ratio | f² | FC compiled bytes ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['fraction']:g} | {r['participants']} | {r['seconds_per_round']:.2g} | {r['time_ratio_to_full']:.2g} | "
        f"{r['f_squared']:g} | {r['bytes_ratio_to_full']:.2g} |"
        for r in rows
    ]
    others = {}
    for r in _jsonl(results, "bench/participation.jsonl"):
        if r["algorithm"] != "federated-clustering":
            others.setdefault(r["algorithm"], []).append(r["seconds_per_round"])
    text = "; ".join(f"{a} {_ms(min(v))}–{_ms(max(v))} a round over the fractions" for a, v in others.items())
    return "\n".join(lines) + (
        f"\n\nN = {rows[0]['clients']:,}, synthetic task, one run "
        f"(`experiments/results/bench/participation.jsonl`); {text}.\n"
    )


def bench_track_clusters(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model track-clusters``: Federated-Clustering's round with ``track_clusters`` (the N x N
    ball mask's components, logged as misclustering) over the same round without (``bench/track_clusters.jsonl``)."""
    rows = _jsonl(results, "bench/track_clusters.jsonl")
    lines = ["| N | s/round | tracked s/round | tracked / plain | ball mask |", "| --- | --- | --- | --- | --- |"]
    lines += [
        f"| {r['clients']:,} | {r['seconds_per_round']:.3g} | {r['tracked_seconds_per_round']:.3g} | "
        f"{r['tracked_over_plain']:.2f} | {r['ball_mask_bytes'] / 1e6:.3g} MB |"
        for r in rows
    ]
    return "\n".join(lines) + (
        "\n\nSynthetic task (d = 10, quantile 0.2, 10 clustering steps, one device), the two "
        "rounds called alternately, medians (`experiments/results/bench/track_clusters.jsonl`).\n"
    )


def bench_study_overhead(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model study``: a study against the same sweeps launched by hand
    (``bench/study_overhead.jsonl``)."""
    (r,) = _jsonl(results, "bench/study_overhead.jsonl")
    return (
        f"A study of {', '.join(r['algorithms'])} ({r['runs']} runs of {r['rounds']} rounds): "
        f"{r['study_seconds']:.1f} s against {r['by_hand_seconds']:.1f} s for the same sweeps by hand, a ratio of "
        f"{r['study_over_by_hand']:.3f} (median of {r['repeats']} interleaved repeats; "
        "`experiments/results/bench/study_overhead.jsonl`).\n"
    )


def bench_srfca(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model srfca``: SR-FCA's all-pairs l2 and cross-loss distances, and a Python loop over
    a jitted pair function at a small N for comparison (``bench/srfca.jsonl``)."""
    rows = [r for r in _jsonl(results, "bench/srfca.jsonl") if r["benchmark"] == "srfca-distances"]
    big = [r for r in rows if "loop_seconds" not in r]
    small = [r for r in rows if "loop_seconds" in r]
    parts = [
        f"at N = {r['clients']:,} ({r['pairs']:,} pairs) the {r['distance']} matrix took {_ms(r['seconds'])} "
        f"(peak {r['peak_bytes'] / 1e6:.2g} MB)"
        for r in big
    ]
    parts += [
        f"at N = {r['clients']} the {r['distance']} matrix was {r['speedup_vs_loop']:,.0f}× faster than a Python "
        f"loop over a jitted pair function ({_ms(r['loop_seconds'] / r['pairs'])} per pair; same values to "
        f"{r['max_relative_difference']:.1g} relative)"
        for r in small
    ]
    return "Measured on the 2-core CPU: " + "; ".join(parts) + " (`experiments/results/bench/srfca.jsonl`).\n"


def _times(ratio: float, above: str, below: str) -> str:
    """``ratio`` as "2.9× slower" (above 1) or, inverted, "1.5× faster" (below 1)."""
    return f"{ratio:.3g}× {above}" if ratio >= 1 else f"{1 / ratio:.3g}× {below}"


def conv_forms(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model cnn``'s ``images-conv-forms`` row: the CNN's per-client gradients with the
    convolutions as patch matmuls and as XLA's convolution (``bench/cnn.jsonl``)."""
    r = next(r for r in _jsonl(results, "bench/cnn.jsonl") if r["benchmark"] == "images-conv-forms")
    return (
        f"The gradients of {r['models']} {r['model'].upper()} client models on {r['batch_size']} examples each "
        f"took {_ms(r['seconds_patches'])} as patch matmuls ({r['gflops_per_s_patches']:g} GFLOP/s) and "
        f"{_ms(r['seconds_lax'])} as XLA's convolution ({r['gflops_per_s_lax']:g} GFLOP/s), "
        f"{_times(r['speedup_patches_vs_lax'], 'slower', 'faster')}, on the {r['device'].upper()} that ran "
        f"`fedjax-clust bench --model cnn` (largest difference of the two gradients "
        f"{r['max_abs_gradient_difference']:.1g}; `experiments/results/bench/cnn.jsonl`).\n"
    )


def accelerator_report(results: pathlib.Path = RESULTS, path: str = "accelerator/nvidia-h100/2026-11-26") -> str:
    """One committed accelerator report (``fedjax-clust bench --suite accelerator`` on a device): its device, each
    target's measured value and status, the precision cost and the report's own notes, from ``PATH/report.json``."""
    report = _load(results, f"{path}/report.json")
    d = report["device"]
    lines = [
        f"{d['kind']} ({d['platform']}, JAX {d['jax']}), {report['date']}, commit `{report['commit']}`: float32 "
        f"matmul {d['matmul_gflops_per_s_highest'] / 1000:.1f} TFLOP/s at full precision, "
        f"{d['matmul_gflops_per_s_default'] / 1000:.0f} at the default (TF32); copy {d['copy_gbytes_per_s']:,.0f} GB/s"
        + ("" if report.get("complete", True) else "; **an incomplete report** (its notes say what is missing)")
        + ".",
        "",
        "| target | size | measured | status |",
        "| --- | --- | --- | --- |",
    ]
    for row in report["rows"]:
        size = ", ".join(
            f"{k} {row[k]:,}" if isinstance(row[k], int) else f"{k} {row[k]}"
            for k in ("algorithm", "rule", "clients", "group_size")
            if k in row
        )
        value = "" if row["measured"] is None else f"{row['measured']:.3g} {row['unit']}"
        if value and "fraction_of_copy" in row:
            value += f" ({row['fraction_of_copy']:.0%} of the copy bandwidth)"
        status = row["status"] + (f": {row['reason']}" if row.get("reason") else "")
        lines.append(f"| {row['target']} | {size} | {value} | {status} |")
    precision = report["costs"].get("precision", {})
    if "highest" in precision:
        lines += [
            "",
            f"Matmul precision (the default experiment, {precision['experiment_clients']} clients, "
            f"{precision['experiment_rounds']} rounds): final mean ‖x − x*‖² "
            f"{precision['highest']['final_mean_sq_dist']:.3g} at full precision against "
            f"{precision['default']['final_mean_sq_dist']:.3g} at the GPU's default (TF32), at "
            f"{precision['time_ratio_highest_vs_default']:.3g}× the time per round.",
        ]
    lines += [""] + [f"- {note}" for note in report.get("notes", [])]
    lines += ["", f"(`experiments/results/{path}/report.json`.)"]
    return "\n".join(lines) + "\n"


def ragged_bench(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --suite ragged``: its report's tables, from ``experiments/results/ragged/report.json``."""
    from fedjax_clust.bench.ragged import ragged_report_markdown

    report = _load(results, "ragged/report.json")
    text = ragged_report_markdown(report).split("\n", 2)[2]  # without the report's own title
    return text + "\n(`experiments/results/ragged/report.json`.)\n"


def char_lstm_bench(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --suite char-lstm``, from ``experiments/results/char-lstm/report.json``."""
    from fedjax_clust.bench.sequence import char_lstm_report_markdown

    report = _load(results, "char-lstm/report.json")
    text = char_lstm_report_markdown(report).split("\n", 2)[2]
    return text + "\n(`experiments/results/char-lstm/report.json`.)\n"


def population_bench(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --suite population``, from ``experiments/results/population/report.json``."""
    from fedjax_clust.bench.population import population_report_markdown

    report = _load(results, "population/report.json")
    text = population_report_markdown(report).split("\n", 2)[2]
    return text + "\n(`experiments/results/population/report.json`.)\n"


def streaming_bench(results: pathlib.Path = RESULTS, path: str = "streaming") -> str:
    """``fedjax-clust bench --suite streaming``, from ``experiments/results/<path>/report.json``."""
    from fedjax_clust.bench.streaming import streaming_report_markdown

    report = _load(results, f"{path}/report.json")
    text = streaming_report_markdown(report).split("\n", 2)[2]
    return text + f"\n(`experiments/results/{path}/report.json`.)\n"


def cohorts_bench(results: pathlib.Path = RESULTS, path: str = "cohorts") -> str:
    """``fedjax-clust bench --suite cohorts``, from ``experiments/results/<path>/report.json``, with the largest
    population's ratios to the smallest's per algorithm and cohort."""
    from fedjax_clust.bench.cohorts import cohorts_report_markdown

    report = _load(results, f"{path}/report.json")
    text = cohorts_report_markdown(report).split("\n", 2)[2]
    worst_time = max(abs(r["seconds_over_smallest"] - 1) for r in report["rows"])
    worst_bytes = max(abs(r["device_bytes_over_smallest"] - 1) for r in report["rows"])
    peaks: dict = {}  # the accelerator's peak in use, per algorithm and cohort (none on a CPU)
    for r in report["rows"]:
        if r.get("device_peak_bytes"):
            peaks.setdefault((r["algorithm"], r["cohort"]), []).append(r["device_peak_bytes"])
    peak = (
        f" and the peaks within {max(max(v) / min(v) - 1 for v in peaks.values()):.1%} of each other" if peaks else ""
    )
    return text + (
        f"\nEvery population within {worst_time:.0%} of the smallest's seconds per round and "
        f"{worst_bytes:.1%} of its device bytes{peak} (targets: 20% and 10%). "
        f"(`experiments/results/{path}/report.json`.)\n"
    )


def privacy_utility(results: pathlib.Path = RESULTS, folder: str = "privacy") -> str:
    """Epsilon against the final error per algorithm and noise multiplier, from ``<folder>/privacy.json``
    (``experiments/privacy_utility.py``)."""
    data = _load(results, f"{folder}/privacy.json")
    rows, settings = data["rows"], data["settings"]
    metric = rows[0]["metric"]
    noises = sorted({r["noise_multiplier"] for r in rows if r["noise_multiplier"] is not None})
    lines = [
        "| attackers | algorithm (DP) | " + " | ".join(f"z = {z:g}" for z in noises) + " |",
        "| --- | --- | " + " | ".join("---" for _ in noises) + " |",
    ]

    def cell(r):
        value = "diverged" if r["value"] is None else f"{r['value']:.4g}"
        return f"ε {r['epsilon']:.3g}: {value}"

    for share in sorted({r["byzantine_fraction"] for r in rows}):
        label = f"{100 * share:g}% {settings['attack']}" if share else "none"
        mine = [r for r in rows if r["byzantine_fraction"] == share]
        for name in dict.fromkeys(r["algorithm"] for r in mine):
            runs = [r for r in mine if r["algorithm"] == name]
            if runs[0]["mode"] == "none":
                value = runs[0]["value"]
                text = "diverged" if value is None else f"{value:.4g}"
                lines.append(
                    f"| {label} | {name} (none: shares nothing, ε = 0) | {text} | "
                    + " | ".join("" for _ in noises[1:])
                    + " |"
                )
                continue
            by_noise = {r["noise_multiplier"]: r for r in runs}
            lines.append(
                f"| {label} | {name} ({runs[0]['mode']}) | "
                + " | ".join(cell(by_noise[z]) if z in by_noise else "" for z in noises)
                + " |"
            )
    return "\n".join(lines) + (
        f"\n\n(Each cell: ε at δ = {settings['delta']:g} after {settings['rounds']} rounds, then the final {metric} "
        f"over the honest clients; `{settings['task']}` task, central clip {settings['clip']:g} and Poisson rate "
        f"{settings['sampling']:g}, local clip {settings['local_clip']:g} per message, learning rate "
        f"{settings['lr']:g}; `experiments/results/{folder}/`, made by `python experiments/privacy_utility.py`.)\n"
    )


def adaptive_clipping(results: pathlib.Path = RESULTS, folder: str = "adaptive-clipping") -> str:
    """The final error of every fixed clip bound and of adaptive clipping, all at one target epsilon, from
    ``<folder>/adaptive.json`` (``experiments/adaptive_clipping.py``)."""
    data = _load(results, f"{folder}/adaptive.json")
    rows, settings = data["rows"], data["settings"]
    metric = rows[0]["metric"]
    clips = sorted({r["clip"] for r in rows if r["clipping"] == "fixed"})
    lines = [
        "| attackers | algorithm | " + " | ".join(f"C = {c:g}" for c in clips) + " | adaptive (final C) |",
        "| --- | --- | " + " | ".join("---" for _ in clips) + " | --- |",
    ]

    def value(r):
        return "diverged" if r["value"] is None else f"{r['value']:.4g}"

    for share in sorted({r["byzantine_fraction"] for r in rows}):
        label = f"{100 * share:g}% {settings['attack']}" if share else "none"
        mine = [r for r in rows if r["byzantine_fraction"] == share]
        for name in dict.fromkeys(r["algorithm"] for r in mine):
            fixed = {r["clip"]: r for r in mine if r["algorithm"] == name and r["clipping"] == "fixed"}
            adaptive = next(r for r in mine if r["algorithm"] == name and r["clipping"] == "adaptive")
            best = min((r["value"] for r in fixed.values() if r["value"] is not None), default=None)
            cells = [
                (f"**{value(fixed[c])}**" if fixed[c]["value"] == best else value(fixed[c])) if c in fixed else ""
                for c in clips
            ]
            lines.append(
                f"| {label} | {name} | " + " | ".join(cells) + f" | {value(adaptive)} ({adaptive['final_clip']:.3g}) |"
            )
    epsilons = [r["epsilon"] for r in rows if r["epsilon"] is not None]
    return "\n".join(lines) + (
        f"\n\n(Final {metric} over the honest clients after {settings['rounds']} rounds, the best fixed bound in "
        f"bold; every run calibrated to ε = {settings['epsilon']:g} at δ = {settings['delta']:g} (spent: "
        f"{min(epsilons):.4g} to {max(epsilons):.4g}), Poisson rate {settings['sampling']:g}; adaptive from C = "
        f"{settings['initial_clip']:g} towards the {settings['clip_quantile']:g} quantile at rate "
        f"{settings['clip_lr']:g}; `{settings['task']}` task, learning rate {settings['lr']:g}; "
        f"`experiments/results/{folder}/`, made by `python experiments/adaptive_clipping.py`.)\n"
    )


def bench_privacy(results: pathlib.Path = RESULTS) -> str:
    """``fedjax-clust bench --model privacy``, from ``experiments/results/bench/privacy.jsonl``."""
    rows = _jsonl(results, "bench/privacy.jsonl")
    rounds = [r for r in rows if r["benchmark"] == "privacy-round"]
    lines = [
        f"| round (N = {rounds[0]['clients']}, d = {rounds[0]['dim']}, fused rounds) | plain (ms) | private "
        "(ms) | private / plain | adaptive clip (ms) | adaptive / plain |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['algorithm']} | {1e3 * r['plain_seconds']:.3g} | {1e3 * r['private_seconds']:.3g} | "
        f"{r['time_ratio']:.2f} | {1e3 * r['adaptive_seconds']:.3g} | {r['adaptive_ratio']:.2f} |"
        for r in rounds
    ]
    poisson = next(r for r in rows if r["benchmark"] == "privacy-poisson")
    sweep = next(r for r in rows if r["benchmark"] == "privacy-sweep")
    lines += [
        f"| global, Poisson q = {poisson['rate']:g} in {poisson['slots']} slots vs a fixed cohort of "
        f"{poisson['fixed_cohort']} | {1e3 * poisson['fixed_cohort_seconds']:.3g} | "
        f"{1e3 * poisson['private_seconds']:.3g} | {poisson['time_ratio']:.2f} | | |",
    ]
    for batching in [b for b in ("vmap", "map") if f"{b}_seconds_per_round" in sweep] or [None]:
        seconds = sweep[f"{batching}_seconds_per_round" if batching else "sweep_seconds_per_round"]
        how = {"vmap": "runs vmapped", "map": "runs mapped", None: "vmapped"}[batching]
        if batching is not None and batching == sweep.get("run_batching"):
            how += ", `sweep`'s choice here"
        lines.append(
            f"| global, {sweep['runs']} noise multipliers: one sweep program ({how}) vs {sweep['runs']} runs "
            f"| {1e3 * sweep['single_runs_seconds_per_round']:.3g} | {1e3 * seconds:.3g} | "
            f"{seconds / sweep['single_runs_seconds_per_round']:.2f} | | |"
        )
    first = rounds[0]
    return "\n".join(lines) + (
        f"\n\n(`experiments/results/bench/privacy.jsonl`, made by `fedjax-clust bench --model privacy --clients "
        f"{first['clients']}` on this project's 2-core CPU; medians of interleaved calls. The clipping pass reads "
        f"{first['clip_bytes'] / 1e6:.2g} MB, {1e6 * first['clip_floor_seconds']:.3g} µs at the "
        f"{first['copy_gbytes_per_s']:.3g} GB/s copy bandwidth measured in the same run: a floor for messages "
        "beyond the caches; these fit in them.)\n"
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def test_suite_times(results: pathlib.Path = RESULTS, path: str = "") -> str:
    """The test suite's cold and warm times from a fresh clone, from ``tests/time_suite.py``'s JSON
    (``test-suite/DATE.json``; the newest when ``path`` is not given)."""
    if not path:
        found = sorted((results / "test-suite").glob("*.json"))
        if not found:
            raise FileNotFoundError(f"no test-suite/*.json under {results}: run python tests/time_suite.py")
        path = found[-1].relative_to(results).as_posix()
    record = _load(results, path)
    full, fast = record["full"], record["fast"]
    install = full["cold"]["wall_seconds"] - full["cold"]["test_seconds"]
    return (
        f"Measured on {record['cpus']} CPU cores from a fresh clone ({record['date']}, commit "
        f"{record['commit'][:7]}, `python tests/time_suite.py`): the whole suite's {full['cold']['tests']:,} "
        f"tests take {_minutes(full['cold']['test_seconds'])} on a cold start and "
        f"{_minutes(full['warm']['test_seconds'])} warm (a second `.ci/run` reading the compiled programs the "
        f"first one kept in `FEDJAX_CLUST_TEST_JAX_CACHE`), the venv and its install another "
        f"{_minutes(install)}; the fast tier's {fast['cold']['tests']:,} tests take "
        f"{_minutes(fast['cold']['test_seconds'])} cold and {_minutes(fast['warm']['test_seconds'])} warm.\n"
    )


TABLES = {
    f.__name__: f
    for f in (
        privacy_utility,
        adaptive_clipping,
        bench_privacy,
        cohorts_bench,
        default_experiment,
        accelerator_report,
        classification_accuracies,
        fig2_constants,
        bench_linear,
        defection_free_claims,
        defection_free_thesis_lr_claims,
        price_discrimination_claims,
        fig1_outcomes,
        fig3_table,
        clipping_elbows,
        table1_table,
        reproduce_commands,
        srfca_table,
        ghosh_fig2a,
        ghosh_fig2b,
        results_vs_papers,
        pd_protocol_bench,
        attack_switch_bench,
        fedavg_bench,
        fedavg_peers,
        flower_server,
        fedavg_study,
        authors_table1,
        authors_srfca,
        byzantine_fig2_6,
        byzantine_image_sweep,
        byzantine_image_breakdown,
        bench_robust,
        bench_mlp,
        bench_cnn,
        bench_scale,
        profile_table,
        subgroups_table,
        bench_participation,
        bench_srfca,
        conv_forms,
        bench_track_clusters,
        bench_study_overhead,
        byzantine_study_breakdown,
        profile_calibration,
        device_efficiency_table,
        device_projection_table,
        network_table,
        peers_table,
        byzantine_study_arm,
        byzantine_study_paired,
        byzantine_ball_edge,
        ragged_bench,
        char_lstm_bench,
        population_bench,
        streaming_bench,
        test_suite_times,
    )
}


def regenerate(text: str, results: pathlib.Path = RESULTS) -> str:
    """``text`` with every generated block made anew from the files under ``results`` (KeyError for a block
    whose NAME is unknown)."""

    def block(m):
        args = (m.group(3),) if m.group(3) else ()
        return m.group(1) + TABLES[m.group(2)](results, *args) + m.group(5)

    return BLOCK.sub(block, text)


def pages() -> list:
    """The pages that may hold generated blocks: every docs page and the README."""
    return sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def stale_pages() -> list:
    """The pages whose generated blocks differ from what the result files give."""
    return [str(p.relative_to(ROOT)) for p in pages() if regenerate(p.read_text()) != p.read_text()]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--check"]:
        stale = stale_pages()
        for page in stale:
            print(f"stale generated block in {page}: run python docs/tables.py", file=sys.stderr)
        return 1 if stale else 0
    if argv:
        print("usage: python docs/tables.py [--check]", file=sys.stderr)
        return 2
    for page in pages():
        text = page.read_text()
        if regenerate(text) != text:
            page.write_text(regenerate(text))
            print(f"regenerated {page.relative_to(ROOT)}")
    return 0


def checkout_python(root: pathlib.Path = ROOT) -> pathlib.Path | None:
    """The interpreter of the checkout's virtual environment (``root/.venv``), or None without one."""
    for name in ("bin/python", "Scripts/python.exe"):
        if (root / ".venv" / name).is_file():
            return root / ".venv" / name
    return None


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this checkout's fedjax_clust formats the tables, installed or not
    try:
        import jax  # noqa: F401 -- the tables are formatted by the package, which needs its dependencies
    except ModuleNotFoundError as missing:
        venv = checkout_python()
        if venv is not None and pathlib.Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
            import os

            os.execv(str(venv), [str(venv), str(pathlib.Path(__file__).resolve()), *sys.argv[1:]])
        sys.exit(
            f"error: docs/tables.py needs fedjax-clust's dependencies ({missing}): pip install -e . first "
            "(or make the checkout's .venv as the README does)"
        )
    sys.exit(main())
