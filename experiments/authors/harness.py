"""What the side-by-side harnesses (``experiments/authors_table1.py``, ``experiments/authors_srfca.py``) share: the
options that locate a reference's checkout, its virtual environment and the pool, and the summary of runs.
Runs in fedjax-clust's environment."""

import os
import tempfile

import numpy as np


def add_reference_options(parser, out: str, repository: str, variable: str, results: str) -> None:
    """--out, --code (default ``$variable``), --setup, --venvs, --seeds, --threads, --work, --timeout,
    --overwrite and --no-progress."""
    parser.add_argument("--out", default=out)
    parser.add_argument(
        "--code", default=os.environ.get(variable), help=f"the {repository} checkout (default: ${variable})"
    )
    parser.add_argument("--setup", action="store_true", help="build the authors' virtual environment if missing")
    parser.add_argument("--venvs", default=os.path.expanduser("~/.cache/fedjax-clust-peers"))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of their runs (default 2)")
    parser.add_argument(
        "--work",
        default=os.path.join(tempfile.gettempdir(), "fedjax-clust-authors-pool"),
        help="where the pool's IDX files are written (not the results)",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one run of theirs may take")
    parser.add_argument("--overwrite", action="store_true", help=f"replace an earlier {results} in --out")
    parser.add_argument("--no-progress", action="store_true")


def summarise(runs: list) -> dict:
    """{task: {method: {arm: {"mean", "min", "max", "seeds"}}}} of the runs' final accuracies (%); a diverged
    run's None stays in "seeds" and out of the statistics."""
    out: dict = {}
    for r in runs:
        cell = out.setdefault(r["task"], {}).setdefault(r["method"], {}).setdefault(r["arm"], {"seeds": []})
        cell["seeds"].append(r["accuracy"])
    for per_method in out.values():
        for per_arm in per_method.values():
            for cell in per_arm.values():
                finite = [a for a in cell["seeds"] if a is not None]
                cell.update(
                    mean=float(np.mean(finite)) if finite else None,
                    min=min(finite, default=None),
                    max=max(finite, default=None),
                )
    return out


def prepare_reference(parser, args, repository: str, variable: str, marker: str, venv: str, requirements: list):
    """(the reference's interpreter, the pool's folder): ``args.code`` checked to hold ``marker`` (the parser's
    error naming the clone command's place otherwise), its virtual environment ``venv`` found or, with --setup,
    built from ``requirements``, and the pool written under ``args.work``."""
    import pathlib

    from mnist_idx import write_pool
    from peers import venv_python

    if not args.code or not (pathlib.Path(args.code) / marker).exists():
        parser.error(
            f"--code (or ${variable}) must be a {repository} checkout holding {marker}, got "
            f"{args.code!r}; clone it as this script's docstring shows"
        )
    python = venv_python(venv, requirements, pathlib.Path(args.venvs), args.setup)
    return python, write_pool(args.work)
