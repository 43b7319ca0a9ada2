"""The ``fedjax-clust`` command line: ``run``, ``compare``, ``bench`` and ``profile``.

Bad arguments print a one-line ``error: ...`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

__all__ = ["main", "build_parser"]

DEFAULT_QUANTILE = 0.2  # the paper's 20th-percentile rule (§4.2), used when neither radius nor quantile is given


def _chunk_arg(text):
    if text in ("auto", "all"):
        return None if text == "all" else text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, 'all' or 'auto', got {text!r}") from None


def _radius_arg(text):
    if text == "theory":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'theory', got {text!r}") from None


def _add_task_args(p):
    g = p.add_argument_group("task")
    g.add_argument("--task", default="synthetic",
                   help="synthetic (Werner et al. §4.1, default), classification (private labels, with a feature "
                        "model), counterexample-myopic, counterexample-ifca or counterexample-cfl")
    g.add_argument("--clusters", type=int, default=4, help="K, number of clusters (default 4)")
    g.add_argument("--clients-per-cluster", type=int, default=75, help="clients per cluster (default 75)")
    g.add_argument("--samples", type=int, default=9, help="samples per client n (default 9)")
    g.add_argument("--dim", type=int, default=10, help="model dimension d (default 10)")
    g.add_argument("--optimum", default="binary", help="how x*_k is drawn: binary ({0,1}^d * scale) or gaussian")
    g.add_argument("--optimum-scale", type=float, default=100.0, help="scale of x*_k (default 100)")


def _add_algo_args(p):
    g = p.add_argument_group("optimisation")
    g.add_argument("--lr", type=float, default=0.01, help="learning rate eta (default 0.01)")
    g.add_argument("--batch-size", type=int, default=None, help="minibatch per client per round (default: all)")
    g.add_argument("--momentum", type=float, default=0.9, help="SGD momentum on the update (default 0.9)")
    f = p.add_argument_group("Federated-Clustering")
    f.add_argument("--clustering-steps", type=int, default=10, help="Threshold-Clustering steps M (default 10)")
    f.add_argument("--radius", type=_radius_arg, default=None,
                   help="fixed clustering radius tau, or 'theory' for tau = sqrt(sigma_hat * Delta_hat)")
    f.add_argument("--quantile", type=float, default=None,
                   help=f"radius = this quantile of the distances at every step (default {DEFAULT_QUANTILE} "
                        "when --radius is not given)")
    f.add_argument("--local-steps", type=int, default=0, help="local SGD steps before each clustered step")
    f.add_argument("--subgroups", type=int, default=1, help="random client subgroups per round G (default 1)")
    f.add_argument("--chunk-size", type=_chunk_arg, default="auto",
                   help="models per cross-gradient chunk: a number, 'all', or 'auto' (default: fit --memory-budget)")
    f.add_argument("--memory-budget", type=float, default=None,
                   help="bytes the cross-gradient chunk may use (default: a quarter of the free memory)")
    f.add_argument("--track-clusters", action="store_true",
                   help="log misclustering of FC's ball components (N x N mask per round)")
    o = p.add_argument_group("other clustering algorithms")
    o.add_argument("--num-clusters", type=int, default=None,
                   help="K for myopic-clustering, momentum-clustering, ifca-1/2, hypcluster (default: true K)")
    o.add_argument("--alpha", type=float, default=0.1, help="momentum-clustering's alpha in eq. (6)")
    o.add_argument("--ditto-lambda", type=float, default=1.0, help="Ditto's lambda (default 1, as in the paper)")
    o.add_argument("--knn-lambda", type=float, default=0.5, help="kNN-Per's interpolation weight lambda_knn")
    o.add_argument("--knn-k", type=int, default=5, help="kNN-Per's number of neighbours")
    o.add_argument("--eps1", type=float, default=0.05, help="CFL: split when the mean update norm is below")
    o.add_argument("--eps2", type=float, default=0.1, help="CFL: ... and the largest client update is above")


def _add_run_args(p, out_default=None):
    p.add_argument("--rounds", type=int, default=300, help="communication rounds (default 300)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the run (default 0)")
    p.add_argument("--eval-every", type=int, default=10, help="evaluate every k rounds (default 10)")
    p.add_argument("--out", default=out_default, required=out_default is None, help="output folder")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedjax-clust", description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-devices", type=int, default=None,
                        help="JAX CPU devices to split clients over (default: one per core; 1: no splitting)")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one algorithm on one task")
    run.add_argument("--algorithm", required=True,
                     help="federated-clustering, local, global, ground-truth, myopic-clustering, "
                          "momentum-clustering, ifca-1, ifca-2, hypcluster, cfl, ditto or knn-per")
    _add_task_args(run)
    _add_algo_args(run)
    _add_run_args(run)
    run.add_argument("--checkpoint-every", type=int, default=None,
                     help="save the whole run state every k rounds to OUT/checkpoints (Orbax)")
    run.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in OUT/checkpoints")
    cmp_ = sub.add_parser("compare", help="run several algorithms, print a table, plot convergence")
    cmp_.add_argument("--algorithms", default="federated-clustering,local,global,ground-truth",
                      help="comma-separated algorithm names")
    _add_task_args(cmp_)
    _add_algo_args(cmp_)
    _add_run_args(cmp_, out_default="results")
    bench = sub.add_parser("bench", help="time one round of each configuration (JSON lines)")
    bench.add_argument("--model", choices=["linear", "mlp"], default="linear",
                       help="linear: every algorithm on the synthetic task (default); mlp: the FLOP rate of "
                            "Federated-Clustering's cross-gradient kernel on an 11,110-parameter MLP")
    bench.add_argument("--clients", default=None,
                       help="comma-separated client counts N (default 300; --model mlp: one N, default 4096)")
    bench.add_argument("--repeats", type=int, default=None,
                       help="timed repetitions per configuration (default 20; --model mlp: 3)")
    bench.add_argument("--pair-loop-rounds", type=int, default=1,
                       help="rounds of the Python pair-loop reference to time (0: skip)")
    bench.add_argument("--quantile", type=float, default=DEFAULT_QUANTILE, help="quantile radius rule")
    bench.add_argument("--clustering-steps", type=int, default=10)
    m = bench.add_argument_group("--model mlp")
    m.add_argument("--subgroups", type=int, default=16, help="random subgroups G per round (default 16)")
    m.add_argument("--batch-size", type=int, default=32,
                   help="minibatch per client (default 32, the paper's neural-network runs)")
    m.add_argument("--input-dim", type=int, default=100, help="MLP inputs (default 100)")
    m.add_argument("--hidden", type=int, default=100, help="MLP hidden units (default 100)")
    m.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    m.add_argument("--no-single-device", action="store_true",
                   help="skip the one-device repeats (default: also time the round on one device)")
    prof = sub.add_parser("profile", help="scaling sweep over N: time, memory, FLOPs, communication (CSV + plot)")
    prof.add_argument("--out", default="results/profile", help="output folder")
    prof.add_argument("--clients", default="64,128,256,512,1024,2048,4096", help="comma-separated N sweep")
    prof.add_argument("--algorithms", default=None, help="comma-separated algorithm names (default: all)")
    prof.add_argument("--repeats", type=int, default=3, help="timed rounds per configuration")
    prof.add_argument("--loop-max-clients", type=int, default=256,
                      help="largest N at which the per-client Python loop is timed")
    prof.add_argument("--subgroups", default="1,2,4,8,16",
                      help="FC subgroup counts G for the error-vs-time trade-off (default 1,2,4,8,16; 'none': skip)")
    prof.add_argument("--subgroup-clients", type=int, default=512, help="N of the subgroup trade-off (default 512)")
    prof.add_argument("--subgroup-rounds", type=int, default=200,
                      help="training rounds per G in the subgroup trade-off (default 200)")
    return parser


def _task_from_args(args):
    from fedjax_clust.tasks import make_task
    if args.task == "classification":
        return make_task("classification", num_clusters=args.clusters, clients_per_cluster=args.clients_per_cluster,
                         seed=args.seed)
    if args.task != "synthetic":
        return make_task(args.task)  # the constructed examples take no size options
    return make_task("synthetic", num_clusters=args.clusters, clients_per_cluster=args.clients_per_cluster,
                     samples_per_client=args.samples, dim=args.dim, optimum=args.optimum,
                     optimum_scale=args.optimum_scale, seed=args.seed)


def _radius_rule(args):
    if args.radius is None and args.quantile is None:
        return dict(radius=None, quantile=DEFAULT_QUANTILE)
    return dict(radius=args.radius, quantile=args.quantile)


def _fc_options(args):
    budget = None if args.memory_budget is None else int(args.memory_budget)
    return dict(clustering_steps=args.clustering_steps, local_steps=args.local_steps, subgroups=args.subgroups,
                chunk_size=args.chunk_size, memory_budget=budget, track_clusters=args.track_clusters,
                **_radius_rule(args))


def _algo_options(name, args):
    """The command-line options that apply to algorithm ``name``."""
    k = {} if args.num_clusters is None else dict(num_clusters=args.num_clusters)
    tau = {} if args.local_steps == 0 else dict(local_steps=args.local_steps)
    return {
        "federated-clustering": _fc_options(args),
        "myopic-clustering": k,
        "momentum-clustering": dict(alpha=args.alpha, clustering_steps=args.clustering_steps, **k,
                                    **_radius_rule(args)),
        "ifca-1": k, "ifca-2": dict(**k, **tau), "hypcluster": dict(**k, **tau),
        "cfl": dict(eps1=args.eps1, eps2=args.eps2, **tau),
        "ditto": dict(lam=args.ditto_lambda),
        "knn-per": dict(lam=args.knn_lambda, k=args.knn_k),
    }.get(name, {})


def _cmd_run(args):
    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.simulate import simulate
    task = _task_from_args(args)
    algo = make_algorithm(args.algorithm, task, learning_rate=args.lr, momentum=args.momentum,
                          batch_size=args.batch_size, **_algo_options(args.algorithm, args))
    result = simulate(algo, task, rounds=args.rounds, seed=args.seed, eval_every=args.eval_every,
                      progress=not args.no_progress, out_dir=args.out, checkpoint_every=args.checkpoint_every,
                      resume=args.resume)
    print(json.dumps({k: v for k, v in result.summary.items() if not isinstance(v, dict)}, default=float))


def _cmd_compare(args):
    from fedjax_clust.compare import format_table, run_comparison
    task = _task_from_args(args)
    names = [n.strip() for n in args.algorithms.split(",") if n.strip()]
    results = run_comparison(task, names, rounds=args.rounds, seed=args.seed, learning_rate=args.lr,
                             momentum=args.momentum, batch_size=args.batch_size, eval_every=args.eval_every,
                             out_dir=args.out, progress=not args.no_progress,
                             options={name: _algo_options(name, args) for name in names})
    print(format_table(results))
    print(f"\nwrote {os.path.join(args.out, 'results.json')} and {os.path.join(args.out, 'convergence.png')}")


def _cmd_bench(args):
    if args.model == "mlp":
        from fedjax_clust.mlp_bench import run_mlp_benchmark
        clients = _int_list(args.clients or "4096", "--clients")
        if len(clients) != 1:
            raise ValueError(f"--model mlp takes one client count, got {args.clients!r}")
        rows = run_mlp_benchmark(clients[0], subgroups=args.subgroups, batch_size=args.batch_size,
                                 input_dim=args.input_dim, hidden=args.hidden, classes=args.classes,
                                 repeats=args.repeats or 3, clustering_steps=args.clustering_steps,
                                 quantile=args.quantile, single_device=not args.no_single_device)
    else:
        from fedjax_clust.bench import run_benchmarks
        rows = run_benchmarks(_int_list(args.clients or "300", "--clients"), repeats=args.repeats or 20,
                              pair_loop_rounds=args.pair_loop_rounds, quantile=args.quantile,
                              clustering_steps=args.clustering_steps)
    for row in rows:
        print(json.dumps(row), flush=True)


def _int_list(text, flag):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag} must list at least one integer, got {text!r}")
    return values


def _cmd_profile(args):
    from fedjax_clust.profile import profile
    clients = _int_list(args.clients, "--clients")
    if min(clients) < 4:
        raise ValueError(f"--clients must list client counts >= 4, got {args.clients!r}")
    names = None if args.algorithms is None else [a.strip() for a in args.algorithms.split(",") if a.strip()]
    for name in names or []:
        from fedjax_clust.algorithms import ALGORITHMS
        if name not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {name!r}; expected one of {list(ALGORITHMS)}")
    groups = None if args.subgroups == "none" else _int_list(args.subgroups, "--subgroups")
    if groups is not None:
        from fedjax_clust.profile import check_subgroup_sweep
        check_subgroup_sweep(args.subgroup_clients, groups)
        if args.subgroup_rounds < 1:
            raise ValueError(f"--subgroup-rounds must be a positive integer, got {args.subgroup_rounds}")
    profile(clients, names, repeats=args.repeats, loop_max_clients=args.loop_max_clients, out_dir=args.out)
    print(f"wrote {os.path.join(args.out, 'profile.csv')} and {os.path.join(args.out, 'profile.png')}")
    if groups is not None:
        from fedjax_clust.profile import subgroup_tradeoff
        subgroup_tradeoff(args.subgroup_clients, groups, rounds=args.subgroup_rounds, out_dir=args.out)
        print(f"wrote {os.path.join(args.out, 'subgroups.csv')} and {os.path.join(args.out, 'subgroups.png')}")


def _validate(args):
    for name in ("rounds", "eval_every", "repeats"):
        if hasattr(args, name) and getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    for name in ("lr", "quantile", "optimum_scale"):
        value = getattr(args, name, None)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"--{name.replace('_', '-')} must be finite, got {value}")


def _setup_devices(cpu_devices):
    """One JAX CPU device per core (or ``cpu_devices``), before JAX starts: Federated-Clustering splits its
    rows over the devices (see fedjax_clust.sharding)."""
    import jax

    from fedjax_clust.sharding import use_all_cpu_cores
    if cpu_devices is None:
        use_all_cpu_cores()
        return
    if cpu_devices < 1:
        raise ValueError(f"--cpu-devices must be a positive integer, got {cpu_devices}")
    try:
        jax.config.update("jax_num_cpu_devices", cpu_devices)
    except RuntimeError:
        pass  # backends already initialised (e.g. main() called twice in one process)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _setup_devices(args.cpu_devices)
        _validate(args)
        {"run": _cmd_run, "compare": _cmd_compare, "bench": _cmd_bench, "profile": _cmd_profile}[args.command](args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
