"""`fedjax-clust network`: a profile's rounds over a deployment's network."""

from __future__ import annotations

import os

from fedjax_clust.cli.arguments import name_list
from fedjax_clust.cli.command import COMMANDS, Command
from fedjax_clust.cli.resolve import wrote
from fedjax_clust.cost.devices import DEVICES
from fedjax_clust.cost.network import NETWORKS


def add_parser(sub, scope):
    """Declare `fedjax-clust network` on the command line's subparsers (``scope``: the help's narrowing, see
    :func:`fedjax_clust.cli.arguments.help_scope`)."""
    net = sub.add_parser(
        "network",
        help="a profile's rounds over a deployment's network: round wall time per algorithm and N, time to a "
        "target error from real runs (projections, CSV + plot)",
        description="Project every round of a profile over a network (fedjax_clust.cost.network): each client's "
        "traffic (its algorithm's per-client bytes up and down), links and compute, the server's link and its "
        "program; a synchronous round waits for its slowest participant, a --deadline drops stragglers. With "
        "--runs and --target: the rounds a real run needed to reach the target x the projected round time.",
    )
    net.add_argument("profile", help="a profile's folder (or its profile.json)")
    net.add_argument(
        "--network",
        required=True,
        help="a registered network (" + ", ".join(NETWORKS) + ") or a trace file (CSV / JSON with the columns "
        "up_bytes_per_s, down_bytes_per_s, latency_s and optionally flops_per_s, one row per client)",
    )
    net.add_argument("--out", default=None, help="output folder (default: the profile's folder)")
    net.add_argument("--overwrite", action="store_true", help="replace earlier network projections in --out")
    net.add_argument(
        "--server-bandwidth", type=float, default=None, help="server bytes/s each way (default: unlimited)"
    )
    net.add_argument("--deadline", type=float, default=None, help="seconds after which a round drops its stragglers")
    net.add_argument("--examples", type=int, default=32, help="examples a client's minibatch evaluation reads (32)")
    net.add_argument(
        "--server-device",
        default=None,
        help="project the server's program onto this registered device (" + ", ".join(DEVICES) + ") instead of "
        "the time measured by the profile; also extends N to the projection's grid",
    )
    net.add_argument("--algorithms", default=None, help="comma-separated algorithms of the profile (default: all)")
    net.add_argument("--runs", default=None, help="a run folder, or a compare's folder of runs: rounds to --target")
    net.add_argument("--metric", default="mean_sq_dist_to_optimum", help="the metric --target applies to")
    net.add_argument("--target", type=float, default=None, help="the metric's target value (with --runs)")
    net.add_argument("--rounds", type=int, default=50, help="rounds drawn per configuration with partial participation")
    net.add_argument("--seed", type=int, default=0, help="seed of the drawn links and participants (default 0)")
    return net


def network_command(args):
    from fedjax_clust.bench.device_projection import load_profile
    from fedjax_clust.bench.network_projection import NETWORK_FILES, TimeToTarget, network_projection, write_network
    from fedjax_clust.core.validation import check_int, check_seed
    from fedjax_clust.cost.devices import device
    from fedjax_clust.io.run_folder import check_out_dir, claim_outputs

    check_int("--examples", args.examples)
    check_int("--rounds", args.rounds)
    check_seed(args.seed, "--seed")
    if args.server_device is not None:
        device(args.server_device)
    payload = load_profile(args.profile)
    algorithms = None if args.algorithms is None else name_list(args.algorithms, "--algorithms")
    result = network_projection(
        payload,
        args.network,
        server_bandwidth=args.server_bandwidth,
        deadline=args.deadline,
        examples=args.examples,
        server_device=args.server_device,
        algorithms=algorithms,
        to_target=None
        if args.runs is None and args.target is None
        else TimeToTarget(args.runs, args.target, args.metric),
        rounds=args.rounds,
        seed=args.seed,
    )
    out = args.out or (args.profile if os.path.isdir(args.profile) else os.path.dirname(args.profile) or ".")
    check_out_dir(out, "--out")
    claim_outputs(out, NETWORK_FILES, args.overwrite)
    write_network(result, out)
    print(wrote(out, NETWORK_FILES) + " (projections, not measurements)")
    return 0


COMMANDS.register(Command("network", add_parser, network_command))
