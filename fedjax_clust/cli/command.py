"""The registry of the command line's commands: each is a :class:`Command` (its name, how it declares its options on
the parser, what it does with them), registered where it is defined (:mod:`fedjax_clust.cli.subcommands`, one module
per command); :func:`fedjax_clust.cli.commands.build_parser` and ``main`` read the registry, in its order."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Callable, Optional

from fedjax_clust.core.registry import Registry

__all__ = ["Command", "COMMANDS"]


@dataclasses.dataclass(frozen=True)
class Command:
    """One command: ``add_parser(subparsers, scope) -> parser`` declares it and its options (``scope``: the help's
    narrowing to the algorithms and task a ``--help`` line names, or None), ``run(args) -> exit status`` does it."""

    name: str
    add_parser: Callable[[argparse._SubParsersAction, Optional[dict]], argparse.ArgumentParser]
    run: Callable[[argparse.Namespace], int]


COMMANDS: Registry[Command] = Registry("command", value_type=Command, built_in_module="fedjax_clust.cli.subcommands")
