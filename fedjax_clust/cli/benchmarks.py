"""The registry of ``fedjax-clust bench --model`` benchmarks: each is a :class:`BenchSpec` (its name, its help, the
flags it reads, the function that checks them and returns its JSON rows). A flag given to a benchmark that does not
read it is an error naming the benchmarks that do, decided from the specs alone (:func:`check_flags`)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Callable

from fedjax_clust.algorithms import ALGORITHMS
from fedjax_clust.cli.arguments import CliError, int_list
from fedjax_clust.core.registry import Registry
from fedjax_clust.core.validation import check_int

__all__ = ["BenchSpec", "BENCHMARKS", "model_flags", "check_flags"]


@dataclasses.dataclass(frozen=True)
class BenchSpec:
    """One benchmark: ``run(args) -> rows`` (JSON-able dicts, one line each), ``flags`` the dests of the bench
    options it reads beyond the ones every benchmark reads (``--repeats``, ``--quantile``, ``--clustering-steps``,
    ``--matmul-precision``), ``quick``: it takes ``--quick`` (tiny sizes) on its own."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], list]
    flags: tuple = ()
    quick: bool = False


BENCHMARKS: Registry[BenchSpec] = Registry("benchmark", value_type=BenchSpec)


def model_flags() -> dict:
    """The options one benchmark or another reads (dest -> flag), from the specs: a flag is a benchmark's own as
    soon as a spec lists it."""
    return {dest: "--" + dest.replace("_", "-") for spec in BENCHMARKS.values() for dest in spec.flags}


def check_flags(spec: BenchSpec, args) -> None:
    """A model flag given to a benchmark that does not read it is an error naming the benchmarks that do (a value
    of 0 is given: only None and an unset switch are not)."""
    for dest, flag in model_flags().items():
        value = getattr(args, dest, None)
        if value is None or value is False or dest in spec.flags:
            continue
        takers = [name for name, other in BENCHMARKS.items() if dest in other.flags]
        where = f" ({flag} applies to --model {' and '.join(takers)} only)" if len(takers) <= 4 else ""
        raise CliError(f"{flag} does not apply to --model {spec.name}{where}")


def _clients(args, default: str) -> list:
    return int_list(args.clients if args.clients is not None else default, "--clients")


def _one_client_count(args, default: str, smallest: int, model: str) -> int:
    clients = _clients(args, default)
    if len(clients) != 1 or clients[0] < smallest:
        raise CliError(f"--model {model} takes one client count >= {smallest}, got {args.clients!r}")
    return clients[0]


def _linear(args) -> list:
    from fedjax_clust.bench.rounds import run_benchmarks

    clients = _clients(args, "300")
    for n in clients:
        check_int("--clients", n, 4)
    pair_loop = args.pair_loop_rounds if args.pair_loop_rounds is not None else 1
    check_int("--pair-loop-rounds", pair_loop, 0)
    subgroups = 1 if args.subgroups is None else args.subgroups
    check_int("--subgroups", subgroups)
    if subgroups > min(clients):
        raise CliError(f"--subgroups {subgroups} exceeds the smallest --clients value {min(clients)}")
    others = None
    if args.others is not None:
        others = () if args.others == "none" else tuple(x.strip() for x in args.others.split(","))
        timed = [a for a in ALGORITHMS if a not in ("federated-clustering", "knn-per")]
        unknown = [x for x in others if x not in timed]
        if unknown:
            raise CliError(f"--others: {unknown[0]!r} is not one of {', '.join(timed)} (or none)")
    return run_benchmarks(
        clients,
        repeats=args.repeats or 20,
        pair_loop_rounds=pair_loop,
        quantile=args.quantile,
        clustering_steps=args.clustering_steps,
        matmul_precision=args.matmul_precision,
        others=others,
        subgroups=subgroups,
    )


def _mlp(args) -> list:
    from fedjax_clust.bench.mlp import run_mlp_benchmark

    clients = _clients(args, "4096")
    if len(clients) != 1:
        raise CliError(f"--model mlp takes one client count, got {args.clients!r}")
    sizes = {"--batch-size": 32, "--input-dim": 100, "--hidden": 100, "--classes": 10}
    for flag in sizes:
        value = getattr(args, flag[2:].replace("-", "_"))
        sizes[flag] = sizes[flag] if value is None else check_int(flag, value, 2 if flag == "--classes" else 1)
    return run_mlp_benchmark(
        clients[0],
        subgroups=args.subgroups or 16,
        batch_size=sizes["--batch-size"],
        input_dim=sizes["--input-dim"],
        hidden=sizes["--hidden"],
        classes=sizes["--classes"],
        repeats=args.repeats or 3,
        clustering_steps=args.clustering_steps,
        quantile=args.quantile,
        single_device=not args.no_single_device,
        matmul_precision=args.matmul_precision,
    )


def _image(args) -> list:
    from fedjax_clust.bench.image import run_image_benchmark

    clients = _clients(args, "300")
    if len(clients) != 1:
        raise CliError(f"--model {args.model} takes one client count, got {args.clients!r}")
    conv_models = 40 if args.conv_models is None else args.conv_models
    check_int("--conv-models", conv_models, 0)
    if conv_models % 4:
        raise CliError(f"--conv-models must be a multiple of 4 (the task's clusters), got {conv_models}")
    return run_image_benchmark(
        clients[0],
        subgroups=args.subgroups or 16,
        batch_size=args.batch_size or 32,
        model=args.model,
        repeats=args.repeats or 3,
        clustering_steps=args.clustering_steps,
        quantile=args.quantile,
        loop_clients=16 if args.loop_clients is None else args.loop_clients,
        conv_models=conv_models,
        matmul_precision=args.matmul_precision,
    )


def _robust(args) -> list:
    from fedjax_clust.bench.rounds import run_robust_benchmarks

    clients = _one_client_count(args, "300", 4, "robust")
    dim = check_int("--dim", 100_000 if args.dim is None else args.dim)
    return run_robust_benchmarks(
        clients,
        dim,
        repeats=args.repeats or 10,
        clients=clients,
        quantile=args.quantile,
        clustering_steps=args.clustering_steps,
    )


def _srfca(args) -> list:
    from fedjax_clust.bench.rounds import run_srfca_benchmarks

    clients = _clients(args, "1000")
    loop_clients = 30 if args.loop_clients is None else args.loop_clients
    if len(clients) != 1 or clients[0] < 4 or loop_clients < 4:
        raise CliError(f"--model srfca takes one client count >= 4 (and --loop-clients >= 4), got {args.clients!r}")
    return run_srfca_benchmarks(clients[0], repeats=args.repeats or 5, loop_clients=loop_clients)


def _participation(args) -> list:
    from fedjax_clust.bench.rounds import run_participation_benchmarks

    return run_participation_benchmarks(_one_client_count(args, "1000", 40, "participation"), repeats=args.repeats or 5)


def _privacy(args) -> list:
    from fedjax_clust.bench.privacy import run_privacy_benchmarks

    clients = _one_client_count(args, "1000", 8, "privacy")
    dim = 100 if args.dim is None else check_int("--dim", args.dim)
    return run_privacy_benchmarks(clients, dim=dim, repeats=args.repeats or 7)


def _pd_protocol(args) -> list:
    from fedjax_clust.bench.games import run_pd_protocol_benchmark

    sizes = {"--seeds": 10, "--rounds": 20_000, "--loop-rounds": 500}
    for flag in sizes:
        value = getattr(args, flag[2:].replace("-", "_"))
        sizes[flag] = sizes[flag] if value is None else check_int(flag, value)
    return run_pd_protocol_benchmark(
        seeds=sizes["--seeds"],
        rounds=sizes["--rounds"],
        loop_rounds=sizes["--loop-rounds"],
        repeats=args.repeats or 3,
    )


def _track_clusters(args) -> list:
    from fedjax_clust.bench.rounds import run_track_clusters_benchmarks

    clients = _clients(args, "300,1200,4800")
    if min(clients) < 4:
        raise CliError(f"--model track-clusters takes client counts >= 4, got {args.clients!r}")
    return run_track_clusters_benchmarks(clients, repeats=args.repeats or 5)


def _study(args) -> list:
    from fedjax_clust.bench.study_overhead import run_study_overhead_benchmark

    rounds = 300 if args.rounds is None else check_int("--rounds", args.rounds)
    return run_study_overhead_benchmark(rounds=rounds, repeats=args.repeats or 5)


def _attack_switch(args) -> list:
    from fedjax_clust.bench.attack_switch import QUICK_ATTACK_SWITCH, run_attack_switch_benchmark

    rounds = 50 if args.rounds is None else check_int("--rounds", args.rounds)
    sizes = QUICK_ATTACK_SWITCH if args.quick else {}
    return run_attack_switch_benchmark(rounds=rounds, repeats=args.repeats or 2, **sizes)


def _fedavg(args) -> list:
    from fedjax_clust.bench.fedavg import run_fedavg_benchmark

    clients = _clients(args, "1000")
    if len(clients) != 1 or clients[0] % 4:
        raise CliError(f"--model fedavg takes one client count, a multiple of 4, got {args.clients!r}")
    batch = 32 if args.batch_size is None else check_int("--batch-size", args.batch_size)
    return run_fedavg_benchmark(clients[0], batch_size=batch, repeats=args.repeats or 5)


_IMAGE = ("clients", "subgroups", "batch_size", "loop_clients", "conv_models")
for _spec in (
    BenchSpec(
        "linear",
        "every algorithm on the synthetic task (default)",
        _linear,
        ("clients", "pair_loop_rounds", "subgroups", "others"),
    ),
    BenchSpec(
        "mlp",
        "the FLOP rate of Federated-Clustering's cross-gradient kernel on an 11,110-parameter MLP",
        _mlp,
        ("clients", "subgroups", "batch_size", "input_dim", "hidden", "classes", "no_single_device"),
    ),
    BenchSpec(
        "cnn",
        "one FC round on MNIST rotation with the CNN at the paper's size (N 300, 16 subgroups, batch 32) and a "
        "per-client Python loop at --loop-clients",
        _image,
        _IMAGE,
    ),
    BenchSpec("lenet5", "as cnn, with LeNet-5", _image, _IMAGE),
    BenchSpec(
        "robust",
        "every robust aggregator on N messages of --dim floats against the mean, and the FC round with and "
        "without 20%% large-gradient attackers",
        _robust,
        ("clients", "dim"),
    ),
    BenchSpec(
        "srfca",
        "SR-FCA's all-pairs l2 and cross-loss distances at N = --clients (default 1,000) and a Python pair loop "
        "at --loop-clients (default 30)",
        _srfca,
        ("clients", "loop_clients"),
    ),
    BenchSpec(
        "participation",
        "FC, IFCA-1 and Global with a fraction 1, 0.5, 0.25, 0.1 of --clients (default 1,000) per round, time "
        "and memory against the full round (FC's S x S block: about f^2)",
        _participation,
        ("clients",),
    ),
    BenchSpec(
        "privacy",
        "Global, IFCA-1 and HypCluster with central DP against the same round without (N = --clients, default "
        "1,000, d = --dim, default 100), Poisson slots against a fixed cohort, and a sweep of 4 noise "
        "multipliers against 4 runs",
        _privacy,
        ("clients", "dim"),
    ),
    BenchSpec(
        "pd-protocol",
        "Fig. 4.5's grid of the thesis's repeated price-discrimination game (20 bias intervals x 3 sellers x "
        "--seeds, --rounds rounds) as one compiled program, against a Python loop over --loop-rounds rounds of "
        "the same round function",
        _pd_protocol,
        ("seeds", "rounds", "loop_rounds"),
    ),
    BenchSpec(
        "track-clusters",
        "Federated-Clustering's round with and without track_clusters (the misclustering's cost) at --clients "
        "(default 300,1200,4800)",
        _track_clusters,
        ("clients",),
    ),
    BenchSpec(
        "study",
        "a study of local, global and ground-truth (2 learning rates x 3 seeds, --rounds, default 300) against "
        "the same sweeps by hand, the host time the study adds",
        _study,
        ("rounds",),
    ),
    BenchSpec(
        "attack-switch",
        "a sweep of 6 attacks x 5 attackers' shares as one program switching over the attack kinds against a "
        "program per kind (Global and Federated-Clustering, runs mapped and vmapped; --rounds, default 50; run "
        "with --compile-cache off)",
        _attack_switch,
        ("rounds",),
        quick=True,
    ),
    BenchSpec(
        "fedavg",
        "FedAvg's local training on the MNIST MLP at --clients (default 1,000), tau = 1 and 5 local steps, one "
        "epoch and FedAdam, against the one-step Global round (--batch-size, default 32)",
        _fedavg,
        ("clients", "batch_size"),
    ),
):
    BENCHMARKS.register(_spec)
del _spec
