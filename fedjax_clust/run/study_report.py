"""A study's outputs: its tables (Markdown, CSV), ``study.json`` and its figures.

:func:`write_study` writes them into a study's folder (:mod:`fedjax_clust.run.study` runs the study):
``study.json`` (the configuration, every run's final metric, the table of intervals and the paired comparisons),
``study.md`` (:func:`study_table_markdown`) and ``study.csv`` (the same tables), ``study.png`` (:func:`plot_study`:
the final metric against the first point dimension, one line per arm with its interval as error bars) and
``curves.png`` (:func:`plot_curves`: the metric over rounds at every grid point with interval bands).
"""

from __future__ import annotations

import csv
import os
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from fedjax_clust.io.jsonio import json_safe, write_json
from fedjax_clust.run.statistics import t_interval

if TYPE_CHECKING:  # the study's result; study.py imports this module
    from fedjax_clust.run.study import StudyResult

__all__ = ["study_table_markdown", "write_study", "plot_study", "plot_curves"]


def cell_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _number(x, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def point_text(point: Mapping) -> str:
    return ", ".join(f"{k}={cell_text(v)}" for k, v in point.items()) or "all"


def _interval_text(row: Mapping) -> str:
    return "–" if row["low"] is None else f"[{_number(row['low'])}, {_number(row['high'])}]"


def study_table_markdown(result: StudyResult) -> str:
    """The study's two tables as Markdown: the final metric per grid point and arm (mean, its t interval,
    standard deviation, n of the seeds), and each arm minus the reference on the same seeds."""
    level = f"{result.confidence:.0%}"
    lines = [
        f"Final {result.metric} ({'higher' if result.higher_is_better else 'lower'} is better), mean over "
        f"{len(result.seeds)} seeds with its {level} t interval:",
        "",
        f"| grid point | arm | mean | {level} interval | std | n | non-finite |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result.table:
        lines.append(
            f"| {point_text(row['point'])} | {row['arm']} | {_number(row['mean'])} | {_interval_text(row)} | "
            f"{_number(row['std'], 3)} | {row['n']} | {row['nonfinite']} |"
        )
    if result.paired:
        sign = "positive" if result.higher_is_better else "negative"
        lines += [
            "",
            "Paired on the seeds (on a seed every algorithm gets the same data and attackers): arm minus "
            f"{result.arms[0]['name']} with its {level} paired t interval ({sign} is better), and the seeds on "
            "which the arm is better, equal or worse:",
            "",
            f"| grid point | arm | mean difference | {level} interval | better / equal / worse | n |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in result.paired:
            lines.append(
                f"| {point_text(row['point'])} | {row['arm']} | {_number(row['mean'])} | {_interval_text(row)} | "
                f"{row['wins']} / {row['ties']} / {row['losses']} | {row['n']} |"
            )
    return "\n".join(lines)


def write_study(result: StudyResult, config: dict, out_dir: str) -> None:
    """``study.json``, ``study.md``, ``study.csv``, ``study.png`` and ``curves.png`` into ``out_dir``."""
    from fedjax_clust.io.provenance import provenance

    write_json(
        os.path.join(out_dir, "study.json"),
        json_safe(
            {
                "config": config,
                "status": "completed",
                "metric": result.metric,
                "higher_is_better": result.higher_is_better,
                "confidence": result.confidence,
                "seeds": result.seeds,
                "arms": result.arms,
                "point_names": result.point_names,
                "points": result.points,
                "table": result.table,
                "paired": result.paired,
                "runs": [
                    {
                        **{k: run[k] for k in ("arm", "algorithm", "point", "seed", "status", "final", "values")},
                        **({"same_as": run["same_as"]} if run.get("same_as") else {}),
                    }
                    for run in result.runs
                ],
                "seconds": result.seconds,
                **result.timing,
                "kept_from_disk": result.kept,
                "provenance": provenance(),
            }
        ),
    )
    with open(os.path.join(out_dir, "study.md"), "w") as f:
        f.write(study_table_markdown(result) + "\n")
    _write_csv(result, os.path.join(out_dir, "study.csv"))
    plot_study(result, os.path.join(out_dir, "study.png"))
    plot_curves(result, os.path.join(out_dir, "curves.png"))


def _write_csv(result: StudyResult, path: str) -> None:
    columns = result.point_names + ["arm", "kind", "mean", "low", "high", "std", "n", "nonfinite", "wins", "ties"]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for kind, rows in (("final", result.table), (f"minus {result.arms[0]['name']}", result.paired)):
            for row in rows:
                writer.writerow(
                    [row["point"][k] for k in result.point_names]
                    + [row["arm"], kind]
                    + [
                        "" if row.get(k) is None else row.get(k)
                        for k in ("mean", "low", "high", "std", "n", "nonfinite")
                    ]
                    + [row.get("wins", ""), row.get("ties", "")]
                )


STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _style(index: int) -> dict:
    """One colour, line style and marker per arm, so overlapping lines stay apart in print and in grey."""
    return {
        "color": f"C{index % 10}",
        "linestyle": STYLES[index % len(STYLES)],
        "marker": MARKERS[index % len(MARKERS)],
    }


def _log_metric(metric: str) -> bool:
    return metric in ("mean_sq_dist_to_optimum", "mean_loss", "mean_dist_to_optimum")


def _band(mean: np.ndarray, rows: Sequence[Mapping], positive: bool) -> tuple:
    """(low, high, cut) of the intervals in ``rows`` (the mean where there is none). A log axis (``positive``)
    cannot draw a lower bound at or below 0: such a bound is drawn at a hundredth of the mean and marked in
    ``cut`` (a bool per row), so the figure can say that its bar is shorter than the table's interval."""
    low = np.asarray([m if r["low"] is None else r["low"] for m, r in zip(mean, rows)], float)
    high = np.asarray([m if r["high"] is None else r["high"] for m, r in zip(mean, rows)], float)
    cut = np.zeros(len(low), bool)
    if positive:
        cut = ~(low > 0) & np.isfinite(mean)
        low = np.where(cut, mean / 100, low)
    return low, high, cut


def _cut_note(cut: int, where: str) -> str:
    """The figure's note on ``cut`` intervals whose lower bound a log axis cannot draw (empty when none)."""
    if not cut:
        return ""
    return f"; {cut} {where} reach 0 or below: cut at a hundredth of the mean (\u25bd)"


def plot_study(result: StudyResult, path: str, max_panels: int = 6) -> None:
    """The final metric against the first point dimension (one panel per combination of the others, the first
    ``max_panels``), one line per arm with its t interval as error bars; without point dimensions, one error
    bar per arm. Numbers on the x axis are positions (a log axis when they are positive and span a factor of
    10 or more), anything else categories; the arms sit side by side at each x so their bars do not overlap."""
    from fedjax_clust.io.figures import figure_for_file

    names = result.point_names
    x_name, others = (names[0], names[1:]) if names else (None, [])
    panels = sorted({tuple(p[k] for k in others) for p in result.points}, key=str)[:max_panels]
    cols = min(len(panels), 3)
    rows_n = -(-len(panels) // cols)
    legend_height = _legend_height(len(result.arms))
    fig, axes = figure_for_file(rows_n, cols, figsize=(5.2 * cols, 3.8 * rows_n + legend_height), squeeze=False)
    xs_all = [p[x_name] for p in result.points] if x_name is not None else []
    numeric = bool(xs_all) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs_all)
    distinct = (sorted(set(xs_all)) if numeric else sorted(set(xs_all), key=str)) if x_name is not None else [None]
    log_x = numeric and min(xs_all) > 0 and max(xs_all) >= 10 * min(xs_all)
    numeric = numeric and len(distinct) > 1  # a single value: a category
    offset = (np.arange(len(result.arms)) - (len(result.arms) - 1) / 2) / max(len(result.arms), 1)
    cut_total = 0
    for ax, panel in zip(axes.flat, panels):
        for index, arm in enumerate(result.arms):
            rows = [
                r for r in result.table if r["arm"] == arm["name"] and tuple(r["point"][k] for k in others) == panel
            ]
            if not numeric:  # categories at 0, 1, ...; the arms within +-0.25 of each
                xs = np.asarray([distinct.index(r["point"][x_name]) if x_name else 0 for r in rows], float)
                xs = xs + 0.5 * offset[index]
            elif log_x:  # a twentieth of the smallest decade apart, multiplicatively
                xs = np.asarray([r["point"][x_name] for r in rows], float) * 10 ** (0.05 * offset[index])
            else:
                step = float(np.min(np.diff(np.asarray(distinct, float))))
                xs = np.asarray([r["point"][x_name] for r in rows], float) + 0.1 * step * offset[index]
            mean = np.asarray([np.nan if r["mean"] is None else r["mean"] for r in rows])
            low, high, cut = _band(mean, rows, positive=_log_metric(result.metric))
            ax.errorbar(xs, mean, yerr=[mean - low, high - mean], capsize=3, label=arm["name"], **_style(index))
            if cut.any():  # the bar's true lower end is off the log axis: an open triangle says so
                ax.plot(xs[cut], low[cut], linestyle="none", marker="v", mfc="none", color=_style(index)["color"])
                cut_total += int(cut.sum())
        if x_name is not None:
            ax.set_xlabel(x_name)
        if log_x and numeric:
            ax.set_xscale("log")
        if not numeric:
            ax.set_xticks(range(len(distinct)), [cell_text(x) for x in distinct] if x_name else [""])
        if _log_metric(result.metric):
            ax.set_yscale("log")
        ax.set_ylabel(f"final {result.metric}")
        ax.set_title(", ".join(f"{k}={cell_text(v)}" for k, v in zip(others, panel)), fontsize=9)
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"mean over {len(result.seeds)} seeds, {result.confidence:.0%} t intervals"
        + _cut_note(cut_total, "interval(s) (study.csv has their bounds)"),
        fontsize=9,
    )
    _legend_below(fig, axes.flat[0], legend_height)
    fig.savefig(path, dpi=110)


LEGEND_COLUMNS = 4


def _legend_height(entries: int) -> float:
    """Inches below the panels for a legend of ``entries`` lines in :data:`LEGEND_COLUMNS` columns."""
    return 0.16 * -(-entries // LEGEND_COLUMNS) + 0.12


def _legend_below(fig, ax, height: float) -> None:
    """One legend for every panel, below them (``height`` inches kept free for it): with many arms a legend
    inside a panel hides the lines."""
    handles, labels = ax.get_legend_handles_labels()
    fig.tight_layout(rect=(0, height / fig.get_figheight(), 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), LEGEND_COLUMNS), fontsize=7, frameon=False)


def plot_curves(result: StudyResult, path: str, max_panels: int = 12) -> None:
    """The metric over rounds at every grid point (the first ``max_panels``), one line per arm: the mean over
    the seeds with its t interval as a band (rounds where a seed's run had stopped use the others)."""
    from fedjax_clust.io.figures import figure_for_file

    points = result.points[:max_panels]
    cols = min(len(points), 3)
    rows_n = -(-len(points) // cols)
    legend_height = _legend_height(len(result.arms))
    fig, axes = figure_for_file(rows_n, cols, figsize=(4.6 * cols, 3.4 * rows_n + legend_height), squeeze=False)
    cut_rounds = 0
    for ax, point in zip(axes.flat, points):
        for index, arm in enumerate(result.arms):
            runs = [r for r in result.runs if r["arm"] == arm["name"] and r["point"] == point]
            by_round: dict = {}
            for run in runs:
                for row in run["history"]:
                    by_round.setdefault(row["round"], []).append(row.get(result.metric))
            rounds = sorted(by_round)
            intervals = [t_interval(by_round[t], result.confidence, warn=False) for t in rounds]
            mean = np.asarray([np.nan if i.mean is None else i.mean for i in intervals])
            low, high, cut = _band(mean, [i.to_dict() for i in intervals], positive=_log_metric(result.metric))
            style = _style(index)
            ax.plot(rounds, mean, label=arm["name"], color=style["color"], linestyle=style["linestyle"])
            ax.fill_between(rounds, low, high, color=style["color"], alpha=0.15)
            if cut.any():
                ax.plot(
                    np.asarray(rounds)[cut],
                    low[cut],
                    linestyle="none",
                    marker="v",
                    mfc="none",
                    ms=4,
                    color=style["color"],
                )
                cut_rounds += int(cut.sum())
        if _log_metric(result.metric):
            ax.set_yscale("log")
        ax.set_title(point_text(point), fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel(result.metric)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(points) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"mean over {len(result.seeds)} seeds, {result.confidence:.0%} t bands"
        + _cut_note(cut_rounds, "round interval(s)"),
        fontsize=9,
    )
    _legend_below(fig, axes.flat[0], legend_height)
    fig.savefig(path, dpi=110)
