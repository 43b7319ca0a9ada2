"""`fedjax-clust project`: a profile's rounds projected onto named devices."""

from __future__ import annotations

import os

from fedjax_clust.cli.arguments import CliError, name_list
from fedjax_clust.cli.command import COMMANDS, Command
from fedjax_clust.cost.devices import DEVICES


def add_parser(sub, scope):
    """Declare `fedjax-clust project` on the command line's subparsers (``scope``: the help's narrowing, see
    :func:`fedjax_clust.cli.arguments.help_scope`)."""
    proj = sub.add_parser(
        "project",
        help="project a profile onto named devices (H100, A100, L4, T4, TPU v5e, ...): seconds per round against "
        "N, the N at one second and at full memory (projections, CSV + plot)",
        description="Project the rounds a profile counted onto devices from their datasheets, as a range between a "
        "stated efficiency and the one the committed accelerator reports measured (fedjax_clust.cost.devices). "
        "`profile` writes the same files for every device; this reprojects without measuring again.",
    )
    proj.add_argument("profile", help="a profile's folder (or its profile.json)")
    proj.add_argument("--out", default=None, help="output folder (default: the profile's folder)")
    proj.add_argument("--overwrite", action="store_true", help="replace earlier projections in --out")
    proj.add_argument(
        "--devices",
        default=None,
        help="comma-separated device names (default: every registered one and this-machine): "
        + ", ".join([*DEVICES, "this-machine"]),
    )
    proj.add_argument("--algorithms", default=None, help="comma-separated algorithms of the profile (default: all)")
    proj.add_argument(
        "--stated-efficiency",
        default=None,
        help="COMPUTE,MEMORY: the stated end's shares of the peaks (default 0.75,0.75)",
    )
    proj.add_argument("--plot", default=None, help="comma-separated algorithms to plot (default federated-clustering)")
    return proj


def project_command(args):
    import dataclasses

    from fedjax_clust.bench.device_projection import (
        PROJECTION_FILES,
        THIS_MACHINE,
        device_projections,
        load_profile,
        no_calibration,
        rows_by_algorithm,
        write_projections,
    )
    from fedjax_clust.cost.devices import STATED, device
    from fedjax_clust.io.run_folder import check_out_dir, claim_outputs, wrote_files

    devices = None if args.devices is None else name_list(args.devices, "--devices")
    for name in devices or []:
        if name != "this-machine":
            device(name)
    stated = STATED
    if args.stated_efficiency is not None:
        try:
            compute, memory = (float(v) for v in args.stated_efficiency.split(","))
        except ValueError:
            raise CliError(f"--stated-efficiency must be COMPUTE,MEMORY, got {args.stated_efficiency!r}") from None
        try:
            stated = dataclasses.replace(STATED, compute=compute, memory=memory, basis="stated on the command line")
        except ValueError as error:
            raise CliError(f"--stated-efficiency: {error}") from None
    payload = load_profile(args.profile)
    out = args.out or (args.profile if os.path.isdir(args.profile) else os.path.dirname(args.profile) or ".")
    algorithms = None if args.algorithms is None else name_list(args.algorithms, "--algorithms")
    plot = None if args.plot is None else name_list(args.plot, "--plot")
    _, projected = rows_by_algorithm(payload, algorithms)  # ValueError naming one the profile did not run
    if THIS_MACHINE in (devices or []) and not payload.get("calibration"):
        raise no_calibration()
    for name in plot or []:
        if name not in projected:
            raise CliError(f"--plot: {name!r} is not among the projected algorithms")
    check_out_dir(out, "--out")  # the folder is claimed before anything is projected and printed
    claim_outputs(out, PROJECTION_FILES, args.overwrite or out == args.profile or args.out is None)
    projections = device_projections(payload, devices, stated=stated, algorithms=algorithms)
    print(wrote_files(write_projections(projections, out, plot)) + " (projections, not measurements)")
    return 0


COMMANDS.register(Command("project", add_parser, project_command))
