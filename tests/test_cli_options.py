"""The command line's options are derived from the builders (fedjax_clust.cli.options): every option has a
description, its type and choices come from the type hints, and the CLI builds the same algorithm as the
Python API with the same defaults."""

from typing import Literal, Optional, Union

import pytest

import fedjax_clust as fc
from fedjax_clust.cli.arguments import ALGORITHM_OPTIONS, TASK_OPTIONS
from fedjax_clust.cli.commands import build_parser
from fedjax_clust.cli.options import describe, text_converter
from fedjax_clust.cli.resolve import algo_options as _algo_options


def test_text_converter_reads_the_hints():
    convert, choices, switch = text_converter([Union[float, Literal["theory"], None]])
    assert (convert("theory"), convert("2"), convert("1e-3"), choices, switch) == ("theory", 2.0, 1e-3, None, False)
    with pytest.raises(ValueError, match="'theory' or a number"):
        convert("far")
    convert, _, _ = text_converter([Union[int, float, None]])
    assert isinstance(convert("50"), int) and convert("0.5") == 0.5
    convert, _, _ = text_converter([Optional[int]])
    with pytest.raises(ValueError, match="an integer"):
        convert("1.5")
    assert text_converter([Literal["a", "b"]])[1:] == (("a", "b"), False)
    assert text_converter([bool])[2] is True
    assert text_converter([callable]) is None  # not readable from text: a Python-only option


def test_every_option_has_a_description_and_applies_to_someone():
    for opt in ALGORITHM_OPTIONS + TASK_OPTIONS:
        assert opt.owners, opt.flag
        body = opt.help.rsplit(" (", 1)[0]
        assert len(body) > 10, f"{opt.flag} has no docstring description: {opt.help!r}"
    flags = [opt.flag for opt in ALGORITHM_OPTIONS + TASK_OPTIONS]
    assert len(flags) == len(set(flags))


def test_descriptions_are_read_from_the_args_section():
    assert describe(fc.FCClustering, "subgroups").startswith("G random groups per round")
    assert describe(fc.FCClustering, "quantile") == describe(fc.FCClustering, "radius")
    assert describe(fc.ditto, "lam").startswith("lambda_ditto")
    assert describe(fc.ditto, "no_such_option") == ""


def test_flags_follow_the_specs():
    by_flag = {opt.flag: opt for opt in ALGORITHM_OPTIONS}
    assert by_flag["--ditto-lambda"].owners == {"ditto": "lam"}
    assert by_flag["--knn-lambda"].owners == {"knn-per": "lam"}
    assert by_flag["--trim-beta"].owners == {"srfca": "beta", "three-stage": "beta"}
    assert set(by_flag["--momentum"].applies) == {n for n in fc.algorithm_names() if fc.algorithm_spec(n).sgd_momentum}
    assert by_flag["--local-steps-form"].choices == ("sgd", "pseudo-gradient")
    assert by_flag["--track-clusters"].switch
    assert by_flag["--local-steps"].defaults["federated-clustering"] == 0
    assert (
        by_flag["--erm-rounds"].defaults["three-stage"] == 100
        and "three-stage" not in by_flag["--local-steps"].defaults
    )
    assert "srfca" not in by_flag["--threshold"].defaults  # required there


@pytest.mark.parametrize("name", [n for n in fc.ALGORITHMS if n != "knn-per"])
def test_cli_defaults_are_the_api_defaults(name):
    """``fedjax-clust run --algorithm NAME`` (plus the options a small run needs) builds exactly what
    ``make_algorithm(NAME, task, learning_rate=0.01, ...)`` builds: the same hyperparameters."""
    task = fc.synthetic_regression(num_clusters=2, clients_per_cluster=4)
    example = dict(fc.algorithm_spec(name).example_options)
    argv = ["run", "--algorithm", name, "--out", "unused"]
    by_kwarg = {opt.kwarg(name): opt.flag for opt in ALGORITHM_OPTIONS if name in opt.owners}
    for key, value in example.items():
        argv += [by_kwarg[key], str(value)]
    args = build_parser().parse_args(argv)
    from_cli = fc.make_algorithm(name, task, **_algo_options(name, args))
    from_python = fc.make_algorithm(name, task, learning_rate=0.01, **example)
    assert from_cli.hparams == from_python.hparams
    if fc.algorithm_spec(name).sgd_momentum:
        assert from_cli.hparams["momentum"] == 0.9


def test_the_options_reference_is_current():
    """docs/options.md is generated from the builders: regenerate it with
    ``python -m fedjax_clust.cli.options > docs/options.md`` when an option changes."""
    import pathlib

    from fedjax_clust.cli.options import markdown

    path = pathlib.Path(__file__).resolve().parents[1] / "docs" / "options.md"
    assert path.read_text() == markdown(), (
        "docs/options.md is stale: python -m fedjax_clust.cli.options > docs/options.md"
    )


def test_stored_help_is_the_live_parsers_and_starts_no_jax(capsys):
    """``fedjax-clust [COMMAND] --help`` answers from fedjax_clust/cli/_stored_help.py without importing JAX; the
    stored texts are exactly what the live parser prints (python -m fedjax_clust.cli.help_texts rewrites them);
    a narrowed help (--algorithm X) still takes the live parser."""
    import subprocess
    import sys

    from fedjax_clust.cli import help_texts
    from fedjax_clust.cli._stored_help import HELP, PYTHON

    assert set(HELP) == {"", *help_texts.COMMANDS}
    if PYTHON != list(sys.version_info[:2]):
        pytest.skip(f"stored with Python {PYTHON}: this Python's argparse formats help its own way (live parser)")
    for key, text in HELP.items():
        assert text == help_texts.live(key), (
            f"stale stored help for {key or 'the top level'!r}: run python -m fedjax_clust.cli.help_texts"
        )
    probe = (
        "import sys; from fedjax_clust.cli import main; status = main(['run', '--help']); "
        "print('JAX' if 'jax' in sys.modules else 'no JAX', status)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "no JAX 0", done.stderr
    assert "--wandb PROJECT" in done.stdout
    assert help_texts.wanted(["run", "--algorithm", "global", "--help"]) is None
    assert help_texts.wanted(["--cpu-devices", "2", "run", "--help"]) is None
    assert help_texts.wanted(["sweep", "-h"]) == "sweep" and help_texts.wanted(["--help"]) == ""


def test_the_package_imports_its_names_on_first_use():
    """``import fedjax_clust`` starts no JAX; every public name and subpackage resolves on first access."""
    import subprocess
    import sys

    probe = (
        "import sys, fedjax_clust as fc; before = 'jax' in sys.modules; "
        "names = [getattr(fc, n) for n in fc.__all__]; fc.data.save_clients_npz; "
        "print(before, len(names), set(fc.__all__) <= set(dir(fc)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    before, count, listed = done.stdout.split()
    assert before == "False" and int(count) > 40 and listed == "True"
    import fedjax_clust

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fedjax_clust.nope  # noqa: B018 - the attribute access is what raises
