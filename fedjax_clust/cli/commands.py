"""The ``fedjax-clust`` command line: run, compare, sweep, study, bench, profile, project and network.

Exit status: 0 done; 2 bad input (one line ``error: ...`` naming the argument); 3 a run's client models
went non-finite (``--on-nonfinite stop``, the default; results up to that round are written); 74 the output
could not be written (:mod:`fedjax_clust.io.unwritable`); 130 interrupted with Ctrl-C (one line; a run's,
sweep's or study's folder is left resumable with ``--resume``, a comparison runs again with ``--overwrite``).

The algorithm and task options are not declared here: :mod:`fedjax_clust.cli.options` derives them from the
builders' signatures, type hints and docstrings (a plugin's options included), with their defaults. An option
given on the command line that none of the chosen algorithms (or the chosen task) takes is an error, not
silently ignored, and the builders check the values, as they do for the Python API.
"""

from __future__ import annotations

import os
import sys

from fedjax_clust.cli import interrupted
from fedjax_clust.cli.arguments import ALGORITHM_OPTIONS, KEYWORD_NAMED, TASK_OPTIONS, CliError, Parser, help_scope
from fedjax_clust.cli.command import COMMANDS
from fedjax_clust.cli.resolve import CONFIG_COMMANDS, given, one_line
from fedjax_clust.core.moved import moved_names

__all__ = ["main", "build_parser"]

# the names this module held before the command line was split into a module per command (issue 67)
__getattr__ = moved_names(
    __name__,
    {
        "split_list": "fedjax_clust.cli.arguments:split_list",
        "ALL": "fedjax_clust.cli.arguments:ALL",
        "OWN_MODELS": "fedjax_clust.cli.arguments:OWN_MODELS",
        "MODEL_TASKS": "fedjax_clust.cli.arguments:MODEL_TASKS",
        "DEPENDENT": "fedjax_clust.cli.resolve:DEPENDENT",
        "MAY_CHANGE_ON_RESUME": "fedjax_clust.cli.resolve:MAY_CHANGE_ON_RESUME",
        "_algo_options": "fedjax_clust.cli.resolve:algo_options",
    },
    since="0.3.0",
)


def build_parser(scope: dict | None = None) -> Parser:
    """The command line: the global options, then every registered command's (:data:`COMMANDS`, one module each in
    :mod:`fedjax_clust.cli.subcommands`); ``scope`` (from :func:`~fedjax_clust.cli.arguments.help_scope`) narrows
    the help to the named algorithms and task."""
    parser = Parser(prog="fedjax-clust", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="JAX CPU devices to split clients over (default: one per core; 1: no splitting)",
    )
    parser.add_argument(
        "--compile-cache",
        metavar="DIR|off",
        default=None,
        help="JAX's persistent compilation cache: a second run of the same programs reads them instead of "
        "compiling (default: FEDJAX_CLUST_COMPILE_CACHE, else ~/.cache/fedjax-clust/jax; off: none)",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS.values():
        command.add_parser(sub, scope)
    parser.commands = sub.choices  # each command's own parser (--config reads the options of run / sweep)
    return parser


def _parse(argv):
    """The parsed command line; ``run`` / ``sweep`` with ``--config FILE`` first take the file's options (see
    :mod:`fedjax_clust.cli.config_file`), then the command line's, which override them."""
    from fedjax_clust.cli.config_file import (
        ConfigError,
        config_tokens,
        load_config,
        split_config_argument,
    )

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(help_scope(argv))
    try:
        path, rest = split_config_argument(argv)
    except ConfigError as error:
        raise CliError(str(error)) from None
    if path is None:
        at = next((i for i, token in enumerate(rest) if token in parser.commands), None)
        recorded = None if at is None or rest[at] != "run" else _recorded_run_tokens(rest[at + 1 :], parser)
        args = parser.parse_args(rest if recorded is None else rest[: at + 1] + recorded + rest[at + 1 :])
        if getattr(args, "command", None) in CONFIG_COMMANDS:
            args.config = None
        return args
    commands = [i for i, token in enumerate(rest) if token in CONFIG_COMMANDS + ("compare", "bench", "profile")]
    if not commands or rest[commands[0]] not in CONFIG_COMMANDS:
        raise CliError("--config applies to `fedjax-clust run`, `fedjax-clust sweep` and `fedjax-clust study`")
    at = commands[0]
    subparser = parser.commands[rest[at]]
    try:
        tokens = config_tokens(subparser, load_config(path), path, lists=rest[at] in ("sweep", "study"))
    except ConfigError as error:
        raise CliError(str(error)) from None
    args = parser.parse_args(rest[: at + 1] + tokens + rest[at + 1 :])
    args.config = path
    given_here = {token[2:] for token in rest if token.startswith("--")}
    args.config_keys = [t[2:] for t in tokens if t.startswith("--") and t[2:] not in given_here]
    return args


def _recorded_run_tokens(rest, parser):
    """``run --out DIR --resume`` without ``--algorithm`` (``rest``: the tokens after ``run``): the
    command-line tokens of the options the run in DIR was started with (its ``run.json``: the resolved
    options, ``rounds``, ``checkpoint_every``, the tracking destinations and where the rows live), to go before
    the ones given, which override them; None for any other command line."""
    from fedjax_clust.cli.config_file import ConfigError, config_tokens
    from fedjax_clust.io.jsonio import read_json
    from fedjax_clust.io.run_folder import RUN_FILE

    if "--resume" not in rest or any(
        t == "--algorithm" or t.startswith("--algorithm=") or t in ("-h", "--help") for t in rest
    ):
        return None
    outs = [
        rest[i + 1] if t == "--out" else t.split("=", 1)[1]
        for i, t in enumerate(rest)
        if (t == "--out" and i + 1 < len(rest)) or t.startswith("--out=")
    ]
    out = outs[-1] if outs else None  # argparse keeps the last one
    if out is None:
        return None  # argparse names the missing --algorithm and --out
    path = os.path.join(out, RUN_FILE)
    if not os.path.exists(path):
        raise CliError(
            f"--resume without --algorithm continues the run recorded in {path}, and there is none: "
            "give the run's options (or --config FILE)"
        )
    try:
        saved = read_json(path)
        options = dict(saved["config"]["options"])
    except (ValueError, KeyError, TypeError):
        raise CliError(
            f"{path} records no command-line options (a run started from Python, or one run of a "
            "sweep?): give the run's options (or --config FILE) with --resume"
        ) from None
    options["rounds"] = saved.get("rounds")
    if saved.get("checkpoint_every") is not None:
        options["checkpoint-every"] = saved["checkpoint_every"]
    for destination in ("tensorboard", "wandb"):  # tracking goes on where it went (unless given anew)
        if (saved.get("tracking") or {}).get(destination):
            options[destination] = saved["tracking"][destination]
    placement = saved.get("client_rows") or {}  # the rows stay where they were (unless given anew)
    for flag, key in (
        ("device-memory", "device_memory"),
        ("client-rows", "client_rows"),
        ("host-rows-dir", "host_rows_dir"),
    ):
        if placement.get(key) is not None:
            options[flag] = placement[key]
    try:
        return config_tokens(parser.commands["run"], {k: v for k, v in options.items() if v is not None}, path)
    except ConfigError as error:
        raise CliError(str(error)) from None


# the commands that take the algorithms' and the tasks' options (a bench or profile flag of the same name, e.g.
# profile's --clients, is its own option: its errors are not renamed after the task's)
OPTION_COMMANDS = ("run", "compare", "sweep", "study")


def _name_flag(args, message: str) -> str:
    """``message`` with the builder argument it names (``lam must ...``, ``hidden=...``) replaced by the flag
    the user gave it with (``--ditto-lambda must ...``), so that every error names what the user typed."""
    import re

    if args is None or args.command not in OPTION_COMMANDS:  # bench / profile: their own flags, named as given
        return message
    from_file = set(getattr(args, "config_keys", None) or ())  # named by file and key instead
    for opt in ALGORITHM_OPTIONS + TASK_OPTIONS:
        if given(args, opt) and opt.flag[2:] not in from_file and opt.flag not in KEYWORD_NAMED:
            for kwarg in opt.kwargs:
                named = re.sub(rf"^{re.escape(kwarg)}(?=( must|=))", opt.flag, message, count=1)
                if named != message:
                    return named
    return message


def _name_config_key(args, message: str) -> str:
    """``message`` prefixed with the file and key it comes from, when it names an option the run took from
    its ``--config`` file (range checks happen after parsing, with the option's flag or argument name)."""
    import re

    path, keys = getattr(args, "config", None), getattr(args, "config_keys", None)
    if not path or not keys or path in message:
        return message
    kwargs = {opt.dest: opt.kwargs for opt in ALGORITHM_OPTIONS + TASK_OPTIONS}
    for key in keys:
        dest = key.replace("-", "_")
        for name in dict.fromkeys(("--" + key, dest) + kwargs.get(dest, ())):
            if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", message):
                return f"{path}: key {key!r}: {message}"
    return message


def _setup_devices(cpu_devices, own_process: bool):
    """One JAX CPU device per core (or ``cpu_devices``), before JAX starts: Federated-Clustering splits its
    rows over the devices (see fedjax_clust.parallel.sharding). Only in the command's own process: called from
    Python, the caller's process keeps its settings and an explicit ``--cpu-devices`` says how to set them."""
    if cpu_devices is not None:
        from fedjax_clust.core.validation import check_int

        check_int("--cpu-devices", cpu_devices)
    if own_process:
        from fedjax_clust_program import set_cpu_devices  # the program's setup, outside the library

        set_cpu_devices(cpu_devices)  # no effect once the backends are up
    elif cpu_devices is not None:
        print(
            "warning: --cpu-devices sets up the fedjax-clust process; called from Python it changes nothing "
            "(call fedjax_clust_program.set_cpu_devices(K) before JAX starts)",
            file=sys.stderr,
        )


def _setup_compile_cache(option, own_process: bool):
    """JAX's persistent compilation cache, on by default in the command's own process
    (:func:`fedjax_clust_program.enable_compile_cache`); called from Python the caller's process keeps its
    settings (``fedjax_clust_program.use_compile_cache`` is the one call that turns it on)."""
    if own_process:
        from fedjax_clust_program import enable_compile_cache  # the program's setup, outside the library

        enable_compile_cache(option)
    elif option is not None:
        print(
            "warning: --compile-cache sets up the fedjax-clust process; called from Python it changes nothing "
            "(call fedjax_clust_program.use_compile_cache(DIR) before the first compilation)",
            file=sys.stderr,
        )


def _output_failed(error) -> int:
    """One ``error:`` line for an output that could not be written (:mod:`fedjax_clust.io.unwritable`), exit 74."""
    from fedjax_clust.io.unwritable import EXIT_STATUS, OutputError, reason

    what = (
        str(error)
        if isinstance(error, OutputError)
        else f"cannot write {getattr(error, 'filename', None) or 'the output'} ({reason(error)})"
    )
    print(
        f"error: {one_line(what)}; the files written before are intact: free space (or fix the permissions) and "
        "run the command again (--resume continues a run from its newest checkpoint, a sweep or study from its "
        "finished programs)",
        file=sys.stderr,
    )
    return EXIT_STATUS


def main(argv=None) -> int:
    """Run the command line; returns the exit status (see the module docstring).

    ``argv=None`` is the ``fedjax-clust`` program itself (the console script, ``python -m fedjax_clust.cli``):
    it reads ``sys.argv`` and sets up its process before JAX starts (XLA's deterministic GPU ops, one CPU device
    per core; :mod:`fedjax_clust_program`). Called from Python with a list, it changes no process-wide
    setting (environment, JAX config); its one-line warnings hold only while it runs."""
    import warnings

    from fedjax_clust.io.unwritable import is_output_failure
    from fedjax_clust.run.simulate import NonFiniteError

    own_process = argv is None
    if own_process:  # the program's setup lives outside the library (fedjax_clust_program)
        from fedjax_clust_program import enable_gpu_determinism

        enable_gpu_determinism()  # before any JAX computation: XLA reads XLA_FLAGS when its GPU backend starts
    args = None
    with warnings.catch_warnings():  # restores the warning hook on the way out
        warnings.showwarning = lambda message, *_, **__: print(f"warning: {one_line(message)}", file=sys.stderr)
        try:
            args = _parse(argv)
            _setup_devices(args.cpu_devices, own_process)
            _setup_compile_cache(args.compile_cache, own_process)
            return COMMANDS.lookup(args.command).run(args)
        except (CliError, ValueError) as e:
            if is_output_failure(e):
                return _output_failed(e)
            print(f"error: {_name_config_key(args, _name_flag(args, one_line(e)))}", file=sys.stderr)
            return 2
        except OSError as e:
            if not is_output_failure(e):
                raise
            return _output_failed(e)
        except NonFiniteError as e:
            print(f"error: {one_line(e)}", file=sys.stderr)
            return 3
        except KeyboardInterrupt as e:
            return interrupted(e)


if __name__ == "__main__":
    sys.exit(main())
