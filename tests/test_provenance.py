"""Result files say what made them: command, version, commit, machine (fedjax_clust.io.provenance)."""

import json
import pathlib
import subprocess

import fedjax_clust as fc
from fedjax_clust.io.provenance import git_commit, provenance
from fedjax_clust.run.driver_options import Output

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_run_json_records_the_command_version_commit_and_machine(tmp_path):
    task = fc.synthetic_regression(num_clusters=2, clients_per_cluster=3)
    fc.simulate(
        fc.make_algorithm("local", task, learning_rate=0.01),
        task,
        rounds=2,
        output=Output(progress=False, out_dir=str(tmp_path)),
    )
    made = json.loads((tmp_path / "run.json").read_text())["provenance"]
    assert made["version"] == fc.__version__ and made["machine"]["cpus"] >= 1 and made["machine"]["backend"]
    assert made["command"] and made["time"].endswith("+00:00")
    if (ROOT / ".git").exists():  # a checkout (CI clones one): the commit is HEAD's
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        assert made["commit"]["sha"] == head and isinstance(made["commit"]["dirty"], bool)


def test_provenance_is_strict_json():
    text = json.dumps(provenance(), allow_nan=False)
    assert json.loads(text)["commit"] == git_commit()


def test_a_sweep_and_each_of_its_runs_record_provenance(tmp_path):
    task = fc.synthetic_regression(num_clusters=2, clients_per_cluster=3)
    fc.sweep(
        "local",
        task,
        grid={"learning_rate": [0.01, 0.02]},
        rounds=2,
        output=Output(progress=False, out_dir=str(tmp_path)),
    )
    made = json.loads((tmp_path / "sweep.json").read_text())["provenance"]
    assert made["version"] == fc.__version__ and made["machine"]["backend"]
    for run in ("learning_rate=0.01,seed=0", "learning_rate=0.02,seed=0"):
        assert json.loads((tmp_path / "runs" / run / "run.json").read_text())["provenance"] == made
