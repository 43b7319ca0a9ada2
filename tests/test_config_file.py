"""Experiments as TOML files: `run` / `sweep --config`, overrides, one-line errors naming file and key, the
resolved config.toml next to the results (which repeats the run and is what --resume checks)."""

import json
import tomllib

import pytest

from fedjax_clust.cli.commands import main
from fedjax_clust.cli.config_file import dumps_toml, load_config

EXPERIMENT = """\
# FedSoft on a small synthetic task, half the clients per round
[task]
task = "synthetic"
clusters = 2
clients-per-cluster = 5

[algorithm]
algorithm = "fedsoft"
lr = 0.01
fedsoft_lambda = 0.5
predict = "cluster"
participation = 0.5

[run]
rounds = 4
eval-every = 2
no-progress = true
"""


def _summary(folder):
    return json.loads((folder / "summary.json").read_text())


def test_run_from_a_file_with_overrides_writes_a_config_that_repeats_it(tmp_path, capsys):
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    out = tmp_path / "run"
    assert main(["run", "--config", str(tmp_path / "exp.toml"), "--out", str(out), "--lr", "0.02"]) == 0
    summary = _summary(out)
    assert summary["hparams"]["lam"] == 0.5 and summary["hparams"]["learning_rate"] == 0.02  # the CLI wins
    assert summary["hparams"]["participation"]["clients"] == 5 and summary["rounds"] == 4
    written = tomllib.loads((out / "config.toml").read_text())
    assert written["lr"] == 0.02 and written["fedsoft-lambda"] == 0.5 and written["algorithm"] == "fedsoft"
    again = tmp_path / "again"
    assert main(["run", "--config", str(out / "config.toml"), "--out", str(again), "--no-progress"]) == 0
    first, second = summary, _summary(again)
    for key in ("mean_sq_dist_to_optimum", "misclustering", "hparams"):
        assert first[key] == second[key]


@pytest.mark.parametrize(
    "text, message",
    [
        ('algorithm = "fedsoft"\nlrr = 0.1\n', "unknown key 'lrr' (did you mean 'lr'?)"),
        ('algorithm = "fedsoft"\nlearning_rate = 0.1\n', "unknown key 'learning-rate' (did you mean 'lr'?)"),
        ('algorithm = "fedsoft"\nrounds = "ten"\n', "key 'rounds': invalid"),
        ('algorithm = "fedsoft"\nlr = "0.1"\n', "key 'lr' takes a number, got the string '0.1'"),
        ('algorithm = "fedsoft"\nrounds = "10"\n', "key 'rounds' takes a number, got the string '10'"),
        ('algorithm = "fedsoft"\nrounds = 0\n', "key 'rounds': --rounds must be an integer >= 1"),
        ('algorithm = "fedsoft"\nsmoother = 2.0\n', "key 'smoother': smoother must be a finite number in (0, 1]"),
        ('algorithm = "fedsoft"\nlr = [0.1, 0.2]\n', "key 'lr' is a list; lists are for `fedjax-clust sweep`"),
        ('algorithm = "fedsoft"\npredict = "both"\n', "key 'predict': 'both' is not one of personal, cluster"),
        ('algorithm = "fedsoft"\nno-progress = 1\n', "key 'no-progress' is a switch"),
        ('algorithm = "fedsoft"\nrounds = true\n', "key 'rounds' takes a value, not true/false"),
        ('algorithm = "fedsoft"\n[a]\nlr = 0.1\n[b]\nlr = 0.2\n', "key 'lr' is given twice"),
        ('algorithm = "fedsoft\n', "not valid TOML"),
        # an option given an inline table (it read the table's keys as options: "unknown key 'x'")
        ('algorithm = "fedsoft"\nlr = {x = 1}\n', "key 'lr' is given an inline table (lr = {...} or lr.x = ...)"),
        ('algorithm = "fedsoft"\n"task" = { x = 1 }\n', "key 'task' is given an inline table"),
        ('algorithm = "fedsoft"\nlr.x = 1\n', "key 'lr' is given an inline table"),  # a dotted key: the same table
    ],
)
def test_bad_files_get_one_line_errors_naming_the_file_and_the_key(tmp_path, capsys, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["run", "--config", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {path}: ") and message in err, err


def test_section_headers_named_like_options_group_options(tmp_path, capsys):
    """``[task]`` and ``[algorithm]`` headers group options (the docs' layout), though task and algorithm are
    options too: only an inline table given to an option's key is refused."""
    path = tmp_path / "grouped.toml"
    path.write_text('[algorithm]\nalgorithm = "local"\nlr = 0.1\n[task]\nclusters = 2\nclients-per-cluster = 2\n')
    assert main(["run", "--config", str(path), "--rounds", "2", "--out", str(tmp_path / "out"), "--no-progress"]) == 0


def test_config_only_for_run_and_sweep(tmp_path, capsys):
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    assert main(["bench", "--config", str(tmp_path / "exp.toml")]) == 2
    assert "--config applies to" in capsys.readouterr().err
    assert main(["run", "--config", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")]) == 2
    assert "no such configuration file" in capsys.readouterr().err


def test_sweep_takes_lists_from_the_file(tmp_path, capsys):
    (tmp_path / "grid.toml").write_text(
        'algorithm = "federated-clustering"\nclusters = 2\nclients-per-cluster = 4\n'
        "lr = [0.01, 0.02]\nquantile = 0.5\nrounds = 2\neval-every = 2\n"
        'seeds = "0"\nno-progress = true\n'
    )
    out = tmp_path / "sweep"
    assert main(["sweep", "--config", str(tmp_path / "grid.toml"), "--out", str(out)]) == 0
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert sorted(r["values"]["learning_rate"] for r in runs) == [0.01, 0.02]
    assert tomllib.loads((out / "config.toml").read_text())["lr"] == [0.01, 0.02]


def test_resume_checks_the_resolved_options(tmp_path, capsys):
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    out = tmp_path / "run"
    base = ["run", "--config", str(tmp_path / "exp.toml"), "--out", str(out), "--checkpoint-every", "2"]
    assert main(base) == 0
    capsys.readouterr()
    assert main(base + ["--resume", "--rounds", "6", "--eval-every", "3"]) == 2  # a changed option
    assert "eval-every" in capsys.readouterr().err
    assert main(base + ["--resume", "--rounds", "6"]) == 0  # more rounds: allowed


def test_written_toml_round_trips(tmp_path):
    config = {"lr": 0.001, "name": 'a "quoted" \\ name', "on": True, "values": [1, 2.5], "n": 3}
    (tmp_path / "c.toml").write_text(dumps_toml(config, "two\nlines"))
    assert load_config(str(tmp_path / "c.toml")) == config


def _script(name):
    import importlib.util
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(f"{name}_experiment", os.path.join(root, "experiments", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, os.path.join(root, "experiments", "configs")


SHIPPED = [
    "fig1_counterexamples",
    "fig2_assumptions",
    "fig3_synthetic",
    "clipping_iterations",
    "table1",
    "cifar",
    "byzantine",
    "ghosh_synthetic",
    "srfca",
    "srfca_one_shot_ifca",
    "srfca_fedsoft",
]


@pytest.mark.parametrize("config", SHIPPED)
def test_every_shipped_experiment_config_is_valid_for_its_script(tmp_path, config):
    """Each experiment's shipped config parses with its script's own parser, and re-resolving it gives the
    same file (no key the script does not know, no stale value)."""
    import os

    module, folder = _script("srfca" if config.startswith("srfca") else config)
    path = os.path.join(folder, f"{config}.toml")
    with pytest.raises(SystemExit) as stop:
        module.main(["--config", path, "--out", str(tmp_path / "x"), "--write-config", str(tmp_path / "c.toml")])
    assert stop.value.code == 0
    assert load_config(str(tmp_path / "c.toml")) == load_config(path)


def test_a_script_rejects_a_bad_config_key(tmp_path, capsys):
    module, _ = _script("fig2_assumptions")
    (tmp_path / "bad.toml").write_text("roundz = 3\n")
    with pytest.raises(SystemExit) as stop:
        module.main(["--config", str(tmp_path / "bad.toml")])
    assert stop.value.code == 2 and "unknown key 'roundz'" in capsys.readouterr().err
