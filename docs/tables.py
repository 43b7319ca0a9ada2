"""The docs' generated blocks, made from committed result files (never typed by hand).

A page holds a generated block between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; NAME is a
function of :data:`TABLES`, which reads files under ``experiments/results`` and returns the block's markdown.

    python docs/tables.py            # rewrite every generated block from the result files
    python docs/tables.py --check    # exit 1 naming the stale blocks (the test suite runs this check)
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
from types import SimpleNamespace

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results"
BLOCK = re.compile(r"(<!-- generated: (\S+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def default_experiment() -> str:
    """The table ``fedjax-clust compare --out results`` prints, from ``experiments/results/default``."""
    from fedjax_clust.run.compare import format_table
    results = json.loads((RESULTS / "default" / "results.json").read_text())
    table = format_table({name: SimpleNamespace(summary=summary) for name, summary in results.items()})
    first = next(iter(results.values()))
    return ("```\n" + "\n".join(line.rstrip() for line in table.splitlines()) + "\n```\n\n"
            f"(`experiments/results/default/`, made by `fedjax-clust compare --out experiments/results/default` "
            f"with fedjax-clust {first['version']}; seconds per round on the 2-core CPU that ran it.)\n")


def classification_accuracies() -> str:
    """Final test accuracy per algorithm on the classification task, from ``experiments/results/classification``."""
    results = json.loads((RESULTS / "classification" / "results.json").read_text())
    first = next(iter(results.values()))
    lines = ["| algorithm | test accuracy (%) |", "| --- | --- |"]
    lines += [f"| {name} | {100 * summary['test_accuracy']:.1f} |" for name, summary in results.items()]
    return "\n".join(lines) + (f"\n\n({first['task_config']['num_clusters']} clusters x "
                               f"{first['task_config']['clients_per_cluster']} clients, {first['rounds']} rounds; "
                               "`fedjax-clust compare --task classification --algorithms "
                               f"{','.join(results)} --clients-per-cluster "
                               f"{first['task_config']['clients_per_cluster']} --rounds {first['rounds']} --out "
                               "experiments/results/classification`.)\n")


def fig2_constants() -> str:
    """Werner et al. Fig. 2's measured constants, from ``experiments/results/fig2/fig2.json``."""
    result = json.loads((RESULTS / "fig2" / "fig2.json").read_text())
    return (f"Measured ({result['task_config']['clients_per_cluster']} clients per cluster, seed "
            f"{result['task_config'].get('seed', 0)}; `experiments/results/fig2/`): A² ≤ "
            f"{result['A_squared_upper_bound']:.3f} and Δ² ≥ {result['Delta_squared_lower_bound']:.4g}, both "
            "bounded over the run as in the paper's Fig. 2.\n")


def bench_linear() -> str:
    """``fedjax-clust bench --clients 300`` (every algorithm's round on the synthetic task and the Python pair
    loop, same run), from ``experiments/results/bench/linear.jsonl``."""
    rows = [json.loads(line) for line in (RESULTS / "bench" / "linear.jsonl").read_text().splitlines()]
    reference = next(r for r in rows if r.get("benchmark") == "reference")
    timed = [r for r in rows if "algorithm" in r]
    n = timed[0]["clients"]
    lines = [f"| configuration (N = {n}, d = 10, n = 9, 10 clustering steps) | seconds per round (one call) | "
             "seconds per round (fused rounds) |", "| --- | --- | --- |"]
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
        lines.append(f"| federated-clustering, Python loop over the N² client pairs ({loop['radius_rule']}) | "
                     f"{loop['seconds_per_round']:.3g} (**{loop['speedup_vmapped_vs_loop']:g}× slower** than the "
                     "vmapped round) | |")
    lines.append(f"| float32 matmul ({reference['matmul_size']}³) in the same run | "
                 f"{reference['matmul_gflops_per_s']:g} GFLOP/s | |")
    return "\n".join(lines) + "\n\n(`experiments/results/bench/linear.jsonl`, made by `fedjax-clust bench " \
        f"--clients {n}` on the {reference['device_kind']} of this project's 2-core machine; one run: compare " \
        "rows of one run only.)\n"


def _claims_table(folder: str, name: str) -> str:
    result = json.loads((RESULTS / folder / name).read_text())
    lines = ["| claim | holds |", "| --- | --- |"]
    for claim in result["claims"]:
        verdict = "yes" if claim["holds"] else "**no**"
        if "seeds" in claim:
            verdict += f" ({claim['seeds_holding']} of {claim['seeds']} seeds)"
        lines.append(f"| {claim['claim']} | {verdict} |")
    return "\n".join(lines) + f"\n\n(`experiments/results/{folder}/{name}`; each claim's measurements are in its " \
                              "`summary.md`.)\n"


def defection_free_claims() -> str:
    """§3.5's claims in the committed lr 0.1 x 300 rounds run."""
    return _claims_table("defection_free", "defection_free.json")


def defection_free_thesis_lr_claims() -> str:
    """§3.5's claims in the committed run at the thesis's learning rate."""
    return _claims_table("defection_free_thesis_lr", "defection_free.json")


def price_discrimination_claims() -> str:
    """Ch. 4's claims in the committed run."""
    return _claims_table("price_discrimination", "price_discrimination.json")


TABLES = {f.__name__: f for f in (default_experiment, classification_accuracies, fig2_constants, bench_linear,
                                  defection_free_claims, defection_free_thesis_lr_claims,
                                  price_discrimination_claims)}


def regenerate(text: str) -> str:
    """``text`` with every generated block made anew (KeyError for a block whose NAME is unknown)."""
    return BLOCK.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + m.group(4), text)


def stale_pages() -> list:
    """The docs pages whose generated blocks differ from what the result files give."""
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").rglob("*.md"))
            if regenerate(p.read_text()) != p.read_text()]


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
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text()
        if regenerate(text) != text:
            page.write_text(regenerate(text))
            print(f"regenerated {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
