"""Experiments as files: a run's options in a TOML file, parsed with the command line's own parser.

    fedjax-clust run --config exp.toml [--option value ...]      # command-line options override the file
    fedjax-clust sweep --config grid.toml                         # lists become the sweep's comma lists
    python experiments/fig3_synthetic.py --config experiments/configs/fig3_synthetic.toml

A file holds the options of the command it is given to, each under its flag's name without the dashes
(``lr``, ``batch-size`` or ``batch_size``), at the top level or grouped in tables of any name (``[task]``,
``[algorithm]``, ``[run]``; the table names are for the reader). ``true`` turns a switch on (a switch set in a
file cannot be switched off on the command line); a list is a sweep's list of values. The file's options
become command-line tokens placed before the command line's own, so the command line overrides the file and
every value meets the same parsing and checks; a bad key, a value of the wrong type or outside its choices
is a one-line error naming the key and the file.

Why TOML: Python reads it with the standard library's ``tomllib`` (3.11+, no new dependency), its values are
typed (``0.5`` is a float, ``"0.5"`` a string, ``no`` is not a boolean as in YAML 1.1), and a flat file of
options reads like the command line it replaces.

The run writes its full resolved configuration (every option, defaults included) as ``config.toml`` next to
its results; ``fedjax-clust run --config OUT/config.toml`` repeats it.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import tomllib
from typing import Iterable, Optional

import tomli_w

__all__ = [
    "OptionParser",
    "load_config",
    "config_tokens",
    "parse_with_config",
    "dumps_toml",
    "resolved_config",
    "CONFIG_FILE",
    "ConfigError",
    "split_config_argument",
    "experiment_args",
    "experiment_settings",
    "write_experiment_config",
    "claim_experiment",
]

CONFIG_FILE = "config.toml"


class ConfigError(ValueError):
    """A bad configuration file: one line naming the file (and the key)."""


class ConfigOptions(dict):
    """:func:`load_config`'s flat {key: value} mapping; ``tables`` names the top-level keys it flattened that
    were given an inline table (one named after an option is a value given as a table, refused by
    :func:`config_tokens`)."""

    def __init__(self, *args, tables=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.tables = tuple(tables)


def load_config(path: str) -> dict:
    """The options of a TOML file as one flat {key: value} mapping (tables flattened; a key given twice is
    an error)."""
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a folder, not a configuration file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not a readable TOML file ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    flat = {}

    def add(key, value, where):
        name = key.replace("_", "-")
        if name in flat:
            raise ConfigError(f"{path}: key {key!r} is given twice ({where})")
        flat[name] = value

    for key, value in document.items():
        if isinstance(value, dict):
            for inner, inner_value in value.items():
                if isinstance(inner_value, dict):
                    raise ConfigError(f"{path}: key {key}.{inner}: tables nest one level only")
                add(inner, inner_value, f"in [{key}]")
        else:
            add(key, value, "at the top level")
    return ConfigOptions(flat, tables=_inline_tables(path, document))


def _inline_tables(path: str, document: dict) -> list:
    """The top-level keys given an inline table (``lr = {x = 1}``), as opposed to ``[lr]`` section headers,
    which group options: TOML parses both to the same dict, so the file's lines before its first header tell."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    header = next((i for i, line in enumerate(lines) if re.match(r"\s*\[", line)), len(lines))
    inline = r"""\s*(["']?)([^"'=.\s]+)\1\s*(=\s*\{|\.)"""  # KEY = {...}, or dotted KEY.inner = ... (the same)
    assigned = {match.group(2) for line in lines[:header] if (match := re.match(inline, line))}
    return [key for key, value in document.items() if isinstance(value, dict) and key in assigned]


class OptionParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` that records its long options (``long_options``: flag without dashes ->
    the action ``add_argument`` returned, argument groups included), which a configuration file's keys are
    read against. The command line and the experiment scripts build their parsers with it."""

    def __init__(self, *args, **kwargs):
        self.long_options = {}  # before argparse adds --help
        super().__init__(*args, **kwargs)

    def _record(self, action):
        for flag in action.option_strings:
            if flag.startswith("--"):
                self.long_options[flag[2:]] = action
        return action

    def add_argument(self, *args, **kwargs):
        return self._record(super().add_argument(*args, **kwargs))

    def add_argument_group(self, *args, **kwargs):
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument
        group.add_argument = lambda *a, **k: self._record(add(*a, **k))
        return group


def _is_switch(action) -> bool:
    """A ``store_true`` / ``store_false`` option (no value; its constant is the bool it stores)."""
    return action.nargs == 0 and isinstance(action.const, bool)


def _scalar_text(path, key, value) -> str:
    if isinstance(value, bool):
        raise ConfigError(f"{path}: key {key!r} takes a value, not true/false")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{path}: key {key!r} must be a finite number, got {value!r}")
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    raise ConfigError(f"{path}: key {key!r} must be a number or a string, got {type(value).__name__}")


def _check_value(path, key, action, text):
    """The command line's own conversion and choices check of one value, with the file and key named."""
    try:
        value = action.type(text) if action.type is not None else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
        raise ConfigError(f"{path}: key {key!r}: {error}") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{path}: key {key!r}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def config_tokens(
    parser: OptionParser, config: dict, path: str, *, lists: bool = False, ignore: Iterable[str] = ()
) -> list:
    """Command-line tokens of ``config`` (from :func:`load_config`) for ``parser``; ``lists``: a list value is
    a comma-separated list (sweep) instead of an error. ConfigError on an unknown key or a bad value."""
    actions = parser.long_options
    ignore = set(ignore) | {"config", "help"}
    for table in getattr(config, "tables", ()):
        if table.replace("_", "-") in actions and table.replace("_", "-") not in ignore:
            raise ConfigError(
                f"{path}: key {table!r} is given an inline table ({table} = {{...}} or {table}.x = ...); an "
                "option takes a number, a string, true / false or (for sweep) a list, and [name] headers group "
                "options"
            )
    tokens = []
    for key, value in config.items():
        action = actions.get(key)
        if action is None or key in ignore:
            known = sorted(k for k in actions if k not in ignore)
            from fedjax_clust.cli.options import COMMON_FLAGS  # the Python keywords whose flag is another word

            alias = {k.replace("_", "-"): flag for k, flag in COMMON_FLAGS.items()}.get(key)
            close = [alias] if alias in known else difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(known)}"
            raise ConfigError(f"{path}: unknown key {key!r}{hint}")
        flag = "--" + key
        if _is_switch(action):
            if not isinstance(value, bool):
                raise ConfigError(f"{path}: key {key!r} is a switch: true or false, got {value!r}")
            if value == action.const:
                tokens.append(flag)
            continue
        if isinstance(value, list):
            if not lists:
                raise ConfigError(f"{path}: key {key!r} is a list; lists are for `fedjax-clust sweep`")
            if not value:
                raise ConfigError(f"{path}: key {key!r} is an empty list")
            text = ",".join(_scalar_text(path, key, v) for v in value)
        else:
            text = _scalar_text(path, key, value)
        converted = _check_value(path, key, action, text)
        given = value if isinstance(value, list) else [value]
        numbers = converted if isinstance(converted, list) else [converted]
        quoted = [v for v, n in zip(given, numbers) if isinstance(v, str) and _is_number(n)]
        if quoted:  # TOML says what a value is: "0.1" is text, and a number option reads a number
            raise ConfigError(
                f"{path}: key {key!r} takes a number, got the string {quoted[0]!r} (write it without quotes)"
            )
        tokens += [flag, text]
    return tokens


def split_config_argument(argv: list) -> tuple:
    """(path of ``--config PATH`` / ``--config=PATH`` in ``argv`` or None, argv without it)."""
    rest, path, i = [], None, 0
    while i < len(argv):
        token = argv[i]
        if token == "--config":
            if i + 1 >= len(argv):
                raise ConfigError("--config needs a file")
            path, i = argv[i + 1], i + 2
            continue
        if token.startswith("--config="):
            path = token.split("=", 1)[1]
        else:
            rest.append(token)
        i += 1
    return path, rest


def parse_with_config(parser: OptionParser, argv: Optional[list] = None, *, lists: bool = False):
    """``parser.parse_args`` of the tokens of ``--config FILE`` (when given) followed by ``argv``'s own, so
    the command line overrides the file. The namespace's ``config`` is the file's path (or None)."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    path, rest = split_config_argument(argv)
    tokens = [] if path is None else config_tokens(parser, load_config(path), path, lists=lists)
    args = parser.parse_args(tokens + rest)
    args.config = path
    return args


def resolved_config(args: argparse.Namespace, exclude: Iterable[str] = ()) -> dict:
    """The options of a parsed command line as a file would hold them (flag names, None dropped)."""
    skip = set(exclude) | {"config"}
    out = {}
    for dest, value in sorted(vars(args).items()):
        if dest in skip or value is None or callable(value):
            continue
        if hasattr(value, "tolist"):  # an array read from a file (an availability trace): not a file option
            continue
        out[dest.replace("_", "-")] = list(value) if isinstance(value, tuple) else value
    return out


def dumps_toml(config: dict, header: str = "") -> str:
    """A flat TOML document of ``config`` (scalars and lists), keys sorted, after ``header`` comment lines
    (written by ``tomli_w``)."""
    lines = [f"# {line}\n" for line in header.splitlines()]
    body = {key: list(value) if isinstance(value, tuple) else value for key, value in sorted(config.items())}
    return "".join(lines) + tomli_w.dumps(body)


def write_config(directory: str, config: dict, header: str = "") -> str:
    """Write ``config`` as ``directory/config.toml``; returns the path."""
    path = os.path.join(directory, CONFIG_FILE)
    with open(path, "w") as f:
        f.write(dumps_toml(config, header))
    return path


# how an experiment script is run, not what it computes: never part of its configuration or its settings
EXPERIMENT_RUNTIME = ("out", "overwrite", "resume", "no_progress", "write_config", "compile_cache")
_EXPERIMENT_RECORD = ("config", "parsed_options", "experiment_script")  # what experiment_args adds to the namespace


def experiment_args(parser: OptionParser, argv: Optional[list], script: str) -> argparse.Namespace:
    """Experiment script ``script``'s arguments (``experiments/<script>``) with ``--config FILE`` (its options as a
    TOML file, overridden by the command line) and ``--write-config FILE`` (write the resolved options to FILE and
    exit: the shipped ``experiments/configs/*.toml`` are made this way). Exits with status 2 and one line on a bad
    file. Like the ``fedjax-clust`` command, an experiment script run as a program (``argv`` None: it reads
    ``sys.argv``) turns on XLA's deterministic GPU ops and JAX's persistent compilation cache
    (``--compile-cache DIR|off``, as the command's) here, before its first JAX computation
    (:func:`fedjax_clust_program.enable_gpu_determinism`, :func:`fedjax_clust_program.enable_compile_cache`):
    a script's runs that differ only in their data (seeds) compile once; its ``main(argv)`` called from
    Python with a list changes no process-wide setting."""
    if argv is None:
        from fedjax_clust_program import enable_gpu_determinism

        enable_gpu_determinism()
    own_cache = "--compile-cache" in parser._option_string_actions  # a script that sets its cache up itself
    if not own_cache:
        parser.add_argument(
            "--compile-cache",
            metavar="DIR|off",
            default=None,
            help="JAX's persistent compilation cache when run as a program (default: FEDJAX_CLUST_COMPILE_CACHE, "
            "else ~/.cache/fedjax-clust/jax; off: none): runs that differ only in their data compile once",
        )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file of this script's options (keys: the flags without dashes); the command line overrides it",
    )
    parser.add_argument("--write-config", metavar="FILE", help="write the resolved options as a TOML file and exit")
    try:
        args = parse_with_config(parser, argv)
    except ConfigError as error:
        parser.exit(2, f"error: {error}\n")
    # the options as parsed (scripts turn some into lists afterwards): what a configuration file holds
    args.parsed_options = resolved_config(args, EXPERIMENT_RUNTIME)
    args.experiment_script = script
    if argv is None and not args.write_config and not own_cache:
        from fedjax_clust_program import enable_compile_cache

        enable_compile_cache(args.compile_cache)
    if args.write_config:
        with open(args.write_config, "w") as f:
            f.write(dumps_toml(args.parsed_options, _experiment_header(script)))
        parser.exit(0, f"wrote {args.write_config}\n")
    return args


def experiment_settings(args: argparse.Namespace) -> dict:
    """The settings an experiment records in its results: its options after the script's own conversions."""
    skip = EXPERIMENT_RUNTIME + _EXPERIMENT_RECORD
    return {k: v for k, v in vars(args).items() if k not in skip}


def _experiment_header(script: str) -> str:
    return (
        f"Options of experiments/{script} (an option not listed takes its default):\n"
        f"python experiments/{script} --config this file --out DIR"
    )


def write_experiment_config(args: argparse.Namespace, out_dir: str) -> str:
    """The resolved options of an experiment script (as parsed by :func:`experiment_args`) as
    ``out_dir/config.toml``, next to its results."""
    return write_config(out_dir, args.parsed_options, _experiment_header(args.experiment_script))


def claim_experiment(args: argparse.Namespace, outputs) -> None:
    """Claim ``args.out`` for one run of the experiment (:func:`fedjax_clust.io.run_folder.claim_outputs`: ValueError
    if it holds ``outputs`` of an earlier run, unless ``args.overwrite``), then write its ``config.toml``."""
    from fedjax_clust.io.run_folder import claim_outputs

    claim_outputs(args.out, outputs, args.overwrite)
    write_experiment_config(args, args.out)
