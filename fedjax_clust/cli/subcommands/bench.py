"""`fedjax-clust bench`: a benchmark (``--model``, :data:`fedjax_clust.cli.benchmarks.BENCHMARKS`: JSON lines on
stdout) or a report suite (``--suite``, :data:`SUITES`: a folder with report.json and report.md)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Callable

from fedjax_clust.cli.arguments import CliError, Parser
from fedjax_clust.cli.benchmarks import BENCHMARKS, check_flags
from fedjax_clust.cli.command import COMMANDS, Command
from fedjax_clust.core.registry import Registry
from fedjax_clust.core.validation import MATMUL_PRECISIONS
from fedjax_clust.ops.clustering import DEFAULT_QUANTILE


@dataclasses.dataclass(frozen=True)
class SuiteSpec:
    """One ``--suite``: ``run(out, quick, overwrite, progress) -> the one-line summary it prints``."""

    name: str
    help: str
    run: Callable[[str, bool, bool, Callable[[str], None]], str]


SUITES: Registry[SuiteSpec] = Registry("suite", value_type=SuiteSpec)


def _accelerator(out: str, quick: bool, overwrite: bool, progress) -> str:
    from fedjax_clust.bench.accelerator import run_accelerator_suite

    report = run_accelerator_suite(out, quick=quick, overwrite=overwrite, progress=progress)
    counts = {s: sum(r["status"] == s for r in report["rows"]) for s in ("pass", "fail", "skipped", "not judged")}
    judged = (
        f"{counts['not judged']} not judged (quick sizes)"
        if report["quick"]
        else f"{counts['pass']} pass, {counts['fail']} fail"
    )
    return (
        f"{judged}, {counts['skipped']} skipped on {report['device']['kind']}; wrote "
        f"{os.path.join(out, 'report.json')}, report.md and scaling.png"
    )


def report_suite(module: str, run: str, markdown: str, quick: dict, summary: Callable[[dict], str]):
    """A suite whose module's ``run(**sizes, progress=) -> report`` and ``markdown(report) -> text`` write
    report.json and report.md to the folder; ``quick``: its tiny sizes; ``summary(report)``: its printed line."""

    def run_suite(out: str, quick_sizes: bool, overwrite: bool, progress) -> str:
        import importlib

        from fedjax_clust.io.jsonio import write_json

        bench = importlib.import_module(module)
        report_path = os.path.join(out, "report.json")
        if os.path.exists(report_path) and not overwrite:
            raise CliError(f"{report_path} exists; pass --overwrite to replace it")
        report = getattr(bench, run)(**(quick if quick_sizes else {}), progress=progress)
        report["quick"] = bool(quick_sizes)
        os.makedirs(out, exist_ok=True)
        write_json(report_path, report)
        with open(os.path.join(out, "report.md"), "w") as f:
            f.write(getattr(bench, markdown)(report))
        return f"{summary(report)}; wrote {report_path} and report.md"

    return run_suite


def _ragged_summary(report: dict) -> str:
    rows = {(r["kernel"], r["layout"]): r for r in report["rows"]}
    full = rows[("full pass", "ragged")]
    return (
        f"full pass: ragged {full['counted_over_real']:.2f}x the real examples "
        f"(padded {rows[('full pass', 'padded')]['counted_over_real']:.1f}x), {full['over_equal']:.2f}x the "
        "equal-sized population's time"
    )


def _population_summary(report: dict) -> str:
    rows = [r for r in report["rows"] if r["layout"] == "server"]
    return ", ".join(f"N {r['clients']:,} S {r['cohort']:,}: {r['seconds'] * 1e3:.2f} ms" for r in rows)


def _char_lstm_summary(report: dict) -> str:
    return ", ".join(f"{r['clients']} clients {r['achieved_gflops']:.1f} GFLOP/s" for r in report["rows"])


def _streaming_summary(report: dict) -> str:
    return ", ".join(
        f"{r['algorithm']} host/device {r['host_over_device']:.2f}x" for r in report["rows"] if "host_over_device" in r
    )


def _cohorts_summary(report: dict) -> str:
    largest = {}
    for r in report["rows"]:
        largest[(r["algorithm"], r["cohort"])] = r
    return ", ".join(
        f"{a} S {s} N {r['clients']:,}: {r['seconds_over_smallest']:.2f}x time, "
        f"{r['device_bytes_over_smallest']:.3f}x device bytes"
        for (a, s), r in largest.items()
    )


SUITES.register(
    SuiteSpec(
        "accelerator",
        "every accelerator target and cost in one run, written to --out as report.json, report.md and scaling.png "
        "(see fedjax_clust.bench.accelerator)",
        _accelerator,
    )
)
for _spec in (
    SuiteSpec(
        "ragged",
        "full passes and minibatch steps of a log-normal (sigma 1.5) population of 1,000 clients, ragged against "
        "padded and against equal-sized clients, written to --out as report.json and report.md (see "
        "fedjax_clust.bench.ragged)",
        report_suite(
            "fedjax_clust.bench.ragged",
            "run_ragged_suite",
            "ragged_report_markdown",
            dict(num_clients=60, total=2400, sigmas=(0.5, 1.5), repeats=2),
            _ragged_summary,
        ),
    ),
    SuiteSpec(
        "char-lstm",
        "the Shakespeare char-LSTM's client-parallel gradient step at 4, 16 and 32 clients, time and achieved "
        "GFLOP/s (fedjax_clust.bench.sequence)",
        report_suite(
            "fedjax_clust.bench.sequence",
            "run_char_lstm_suite",
            "char_lstm_report_markdown",
            dict(clients=(2,), hidden=16, repeats=2),
            _char_lstm_summary,
        ),
    ),
    SuiteSpec(
        "population",
        "a FedAvg round of 10 or 100 participants against all clients of 1,000 and 10,000, server-held model "
        "against per-client rows (fedjax_clust.bench.population)",
        report_suite(
            "fedjax_clust.bench.population",
            "run_population_suite",
            "population_report_markdown",
            dict(populations=(40,), cohorts=(4,), repeats=2),
            _population_summary,
        ),
    ),
    SuiteSpec(
        "cohorts",
        "FedAvg and IFCA with LEAF's FEMNIST CNN, cohorts of 10 and 100 in populations of 1,000 to 1,000,000 "
        "clients indexing the MNIST pool, seconds and device bytes against N (fedjax_clust.bench.cohorts)",
        report_suite(
            "fedjax_clust.bench.cohorts",
            "run_cohorts_suite",
            "cohorts_report_markdown",
            dict(algorithms=("global",), populations=(100, 1000), cohorts=(4,), model="mlp", rounds=2, repeats=2),
            _cohorts_summary,
        ),
    ),
    SuiteSpec(
        "streaming",
        "Federated-Clustering and Ditto with 100,000 clients' rows in host memory against the resident state "
        "(fedjax_clust.bench.streaming)",
        report_suite(
            "fedjax_clust.bench.streaming",
            "run_streaming_suite",
            "streaming_report_markdown",
            dict(algorithms=("ditto",), clients=400, cohort=10, budget="8MB", samples=4, rounds=2, repeats=2),
            _streaming_summary,
        ),
    ),
):
    SUITES.register(_spec)
del _spec


def _arguments(bench):
    """The bench command's options on its parser ``bench``."""
    bench.add_argument(
        "--model",
        choices=BENCHMARKS.names(),
        default="linear",
        help="; ".join(f"{name}: {spec.help}" for name, spec in BENCHMARKS.items()),
    )
    bench.add_argument(
        "--suite",
        choices=SUITES.names(),
        default=None,
        help="; ".join(f"{name}: {spec.help}" for name, spec in SUITES.items()) + "; --quick runs any of them at "
        "tiny sizes",
    )
    bench.add_argument("--out", default=None, help="--suite: the report's folder")
    bench.add_argument(
        "--quick",
        action="store_true",
        help="--suite and --model attack-switch: tiny sizes (checks the report, not the device)",
    )
    bench.add_argument("--overwrite", action="store_true", help="--suite: replace an earlier report in --out")
    bench.add_argument(
        "--clients",
        default=None,
        help="comma-separated client counts N (default 300; --model mlp: one N, default 4096)",
    )
    bench.add_argument(
        "--repeats", type=int, default=None, help="timed repetitions per configuration (default 20; --model mlp: 3)"
    )
    bench.add_argument(
        "--pair-loop-rounds",
        type=int,
        default=None,
        help="--model linear: rounds of the Python pair-loop reference to time (default 1; 0: skip)",
    )
    bench.add_argument(
        "--quantile", type=float, default=DEFAULT_QUANTILE, help=f"quantile radius rule (default {DEFAULT_QUANTILE})"
    )
    bench.add_argument("--clustering-steps", type=int, default=10)
    bench.add_argument(
        "--matmul-precision",
        choices=MATMUL_PRECISIONS,
        default="highest",
        help="matmul precision of the timed rounds (default highest)",
    )
    m = bench.add_argument_group("--model mlp / cnn / lenet5")
    m.add_argument(
        "--subgroups",
        type=int,
        default=None,
        help="random subgroups G per round (default 16; --model linear: 1, Federated-Clustering only)",
    )
    bench.add_argument(
        "--dim",
        type=int,
        default=None,
        help="--model robust: coordinates per aggregated message (default 100,000); --model privacy: the synthetic "
        "task's d (default 100)",
    )
    bench.add_argument(
        "--others",
        default=None,
        help="--model linear: comma-separated algorithms timed beside Federated-Clustering "
        "(default: all but knn-per; none: Federated-Clustering only)",
    )
    m.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="minibatch per client (default 32, the paper's neural-network runs)",
    )
    m.add_argument(
        "--loop-clients",
        type=int,
        default=None,
        help="--model cnn / lenet5: clients of the per-client Python loop reference (default 16; 0: skip)",
    )
    m.add_argument(
        "--conv-models",
        type=int,
        default=None,
        help="--model cnn / lenet5: client models whose gradients are timed with the convolutions as "
        "patch matmuls and as XLA's convolution (default 40, a multiple of 4; 0: skip)",
    )
    m.add_argument("--input-dim", type=int, default=None, help="MLP inputs (default 100)")
    m.add_argument("--hidden", type=int, default=None, help="MLP hidden units (default 100)")
    m.add_argument("--classes", type=int, default=None, help="classes (default 10)")
    m.add_argument(
        "--no-single-device",
        action="store_true",
        help="skip the one-device repeats (default: also time the round on one device)",
    )
    g = bench.add_argument_group("--model pd-protocol (and study: --rounds)")
    g.add_argument("--seeds", type=int, default=None, help="seeds per (seller, bias interval) (default 10)")
    g.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="pd-protocol: rounds of the compiled grid (default 20,000); study: rounds of every run (default 300)",
    )
    g.add_argument(
        "--loop-rounds",
        type=int,
        default=None,
        help="rounds of the Python-loop reference, also timed compiled (default 500)",
    )
    return bench


def add_parser(sub, scope):
    """Declare `fedjax-clust bench` on the command line's subparsers (its options take no ``scope``)."""
    del scope
    return _arguments(sub.add_parser("bench", help="time one round of each configuration (JSON lines)"))


def _progress(label: str) -> None:
    print(f"measuring: {label}", file=sys.stderr, flush=True)


def _suite(args) -> int:
    """``bench --suite NAME --out DIR [--quick] [--overwrite]``: a report folder."""
    if args.suite is None:
        raise CliError(f"--out, --quick and --overwrite go with --suite ({SUITES.listing(' / ')})")
    if args.out is None:
        raise CliError(f"--suite {args.suite} needs --out DIR")
    own = _arguments(Parser(prog="fedjax-clust bench"))
    defaults = own.parse_args([])
    given = [
        flag
        for flag, action in own.long_options.items()
        if flag not in ("suite", "out", "quick", "overwrite", "help")
        and getattr(args, action.dest) != getattr(defaults, action.dest)
    ]
    if given:
        raise CliError(f"--{given[0]} does not apply to --suite {args.suite}")
    print(SUITES.lookup(args.suite).run(args.out, args.quick, args.overwrite, _progress))
    return 0


def bench_command(args: argparse.Namespace) -> int:
    """`fedjax-clust bench`: a report suite (``--suite``, ``--out``, ``--quick``, ``--overwrite``), or the
    benchmark ``--model`` names with the flags it reads, one JSON line per row."""
    from fedjax_clust.core.validation import check_int
    from fedjax_clust.io.jsonio import dumps

    spec = BENCHMARKS.lookup(args.model)
    quick_model = args.quick and args.suite is None and spec.quick
    if args.suite is not None or args.out is not None or (args.quick and not quick_model) or args.overwrite:
        return _suite(args)
    if args.repeats is not None:
        check_int("--repeats", args.repeats)
    check_flags(spec, args)
    for row in spec.run(args):
        print(dumps(row), flush=True)
    return 0


COMMANDS.register(Command("bench", add_parser, bench_command))
