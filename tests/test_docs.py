"""The documentation: the MkDocs site builds with --strict, every Python block of every page (and of the README)
runs as written, and the README stays a front page whose links reach the docs."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in DOCS.rglob("*.md")) + ["README.md"]
FENCE = re.compile(r"(?m)^```python\n(.*?)^```", re.S)
NO_RUN = re.compile(r"<!-- no-run: (.+?) -->\s*$")
SLOW_PAGES = {"docs/guides/images.md", "docs/python-api.md"}  # MNIST images; many runs: the slow tier
COMPUTE_BOUND_PAGES = {"docs/guides/images.md"}  # run with XLA's optimisations (conftest's optimised_compile)


def python_blocks(text: str) -> list:
    """(code, reason or None) of every ```python block; a block is not run when the line just above its fence
    is ``<!-- no-run: reason -->`` (a download or a GPU it needs)."""
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = NO_RUN.search(before)
        blocks.append((match.group(1), skip.group(1) if skip else None))
    return blocks


def pages_with_code():
    for page in PAGES:
        if python_blocks((ROOT / page).read_text()):
            marks = [pytest.mark.slow] if page in SLOW_PAGES else []
            yield pytest.param(page, marks=marks, id=page)


@pytest.mark.parametrize("page", list(pages_with_code()))
def test_every_python_block_runs(page, tmp_path, monkeypatch, request):
    """A page's blocks run in order in one namespace (a later block may use an earlier one's names), in a
    scratch folder; the process environment is restored after."""
    if page in COMPUTE_BOUND_PAGES:
        request.getfixturevalue("optimised_compile")
    from fedjax_clust.algorithms.registry import algorithm_names, unregister_algorithm
    from fedjax_clust.robust import aggregator_names, attack_names, unregister_aggregator, unregister_attack

    monkeypatch.chdir(tmp_path)
    environ = dict(os.environ)
    registries = (
        (algorithm_names, unregister_algorithm),
        (aggregator_names, unregister_aggregator),
        (attack_names, unregister_attack),
    )
    registered = [set(names()) for names, _ in registries]
    scope = {"__name__": f"docs:{page}"}
    try:
        for i, (code, skipped) in enumerate(python_blocks((ROOT / page).read_text())):
            if skipped is None:
                exec(compile(code, f"{page}, python block {i + 1}", "exec"), scope)
    finally:
        os.environ.clear()
        os.environ.update(environ)
        for (names, unregister), before in zip(registries, registered):  # what a page registered
            for name in set(names()) - before:
                unregister(name)


def test_the_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: every page in the nav, every link and anchor resolves, the API reference
    renders from the docstrings, the committed result figures join the site."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    assert (site / "reference" / "index.html").stat().st_size > 50_000  # the docstrings rendered
    assert "run_protocol" in (site / "reference" / "index.html").read_text()
    assert (site / "results" / "defection_free" / "fig3_3.png").exists()
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p for p in PAGES if p.startswith("docs/") and p[5:] not in nav]
    assert not missing, f"pages outside the nav: {missing}"


def test_readme_is_a_front_page_whose_links_reach_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    first, second = "pip install . && fedjax-clust compare", 'pip install ".[test]" && python -m pytest'
    assert readme.index(first) < readme.index(second) < 1200  # the two commands open the README
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert len(links) >= 12
    for link in links:
        assert link.startswith("http") or (ROOT / link).exists(), link


def test_ci_runs_the_readmes_test_command_in_a_fresh_virtual_environment():
    """`.ci/run` is the README's second command, run inside a venv it creates (as a user runs it), so a test
    that only passes in the machine's own Python cannot land."""
    readme = (ROOT / "README.md").read_text()
    command = re.findall(r"```bash\n(.*?)\n```", readme, re.S)[1].strip()
    assert command == 'pip install ".[test]" && python -m pytest -q --durations=30'
    script = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert command in script
    venv, activate = script.index('python3 -m venv "$venv"'), script.index('. "$venv/bin/activate"')
    assert venv < activate < script.index(command)


def test_the_feature_table_counts_what_the_package_has():
    from fedjax_clust.robust import AGGREGATORS, ATTACKS

    readme = (ROOT / "README.md").read_text()
    assert f"| Byzantine clients | {len(ATTACKS)} attacks" in readme
    assert f"{len([a for a in AGGREGATORS if a != 'mean'])} robust aggregators" in readme


def test_your_own_algorithm_example_registers_and_sweeps():
    """The python-api page's own-algorithm example: registered, with partial participation, swept."""
    from fedjax_clust.algorithms.registry import unregister_algorithm

    text = (DOCS / "python-api.md").read_text()
    code = python_blocks(text[text.index("## Your own algorithm\n") :])[0][0]
    scope = {}
    try:
        exec(compile(code, "docs/python-api.md: Your own algorithm", "exec"), scope)
        assert scope["algo"].hparams["participation"]["clients"] == 5
        assert len(scope["grid"].table) == 2
    finally:
        unregister_algorithm("shrunk-local")


def test_generated_blocks_match_the_committed_result_files():
    """Every ``<!-- generated: NAME -->`` block is what docs/tables.py makes from experiments/results (a stale
    block fails here: python docs/tables.py regenerates them), and every table is used on some page."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_tables", DOCS / "tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    assert tables.stale_pages() == []
    used = {m.group(2) for p in DOCS.rglob("*.md") for m in tables.BLOCK.finditer(p.read_text())}
    assert used == set(tables.TABLES)


def test_tables_finds_the_checkouts_venv_for_a_python_without_the_dependencies(tmp_path):
    """docs/tables.py run by a Python without jax runs itself again with the checkout's .venv interpreter."""
    tables = _module(DOCS / "tables.py", "_tables_checkout_python")
    assert tables.checkout_python(tmp_path) is None
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert tables.checkout_python(tmp_path) == python


def test_the_byzantine_study_tables_read_each_seed(tmp_path):
    """The Byzantine study's breakdown is seed by seed: a seed breaks at beta when its final error is 10x the
    same arm's attack-free error on that seed (or non-finite), and a cell gives the first beta where some seed
    breaks and the first where every seed does; the arm table gives the seeds' median and range, bold only where
    every seed broke; the paired table the median ratio of two arms over the seeds both finished."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("docs_tables_study", DOCS / "tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    finals = {  # (arm, beta) -> final of seeds 0, 1
        ("a", 0.0): [1.0, 2.0],
        ("a", 0.1): [10.0, 3.0],
        ("a", 0.2): [None, 25.0],  # seed 0 at 0.1, both at 0.2
        ("b", 0.0): [1.0, 1.0],
        ("b", 0.1): [9.9, 4.5],
        ("b", 0.2): [2.0, 1.0],  # never (9.9 < 10)
    }
    runs = [
        {"arm": arm, "point": {"byzantine_fraction": beta, "attack": "alie"}, "seed": seed, "final": v}
        for (arm, beta), values in finals.items()
        for seed, v in enumerate(values)
    ]
    table = [
        {"arm": arm, "point": {"byzantine_fraction": beta, "attack": "alie"}, "per_seed": values}
        for (arm, beta), values in finals.items()
    ]
    study = {
        "arms": [{"name": "a"}, {"name": "b"}],
        "seeds": [0, 1],
        "confidence": 0.95,
        "runs": runs,
        "table": table,
        "points": [{"byzantine_fraction": b, "attack": "alie"} for b in (0.0, 0.1, 0.2)],
        "config": {
            "algorithms": ["x"],
            "rounds": 9,
            "options": {"x": {"learning_rate": 0.1, "momentum": 0.0}},
            "task_config": {"num_clusters": 4, "clients_per_cluster": 5},
        },
    }
    (tmp_path / "byzantine-study").mkdir()
    (tmp_path / "byzantine-study" / "study.json").write_text(json.dumps(study))
    rows = tables.byzantine_study_breakdown(tmp_path).splitlines()
    assert rows[2] == "| a | 0.1 / **0.2** |" and rows[3] == "| b | — |"
    arm = tables.byzantine_study_arm(tmp_path, "a").splitlines()  # the median [smallest, largest] of the seeds
    assert arm[2] == "| alie | 1.5 [1, 2] | 6.5 [3, 10] | **25 (1 div.)** |"
    paired = tables.byzantine_study_paired(tmp_path, "b").splitlines()  # b / a seed by seed; seeds where a is lower
    assert paired[2] == "| alie | ×0.75, 0/2 | ×1.25, 1/2 | ×0.04, 0/1 |"
    with pytest.raises(KeyError, match="'c' is not an arm"):
        tables.byzantine_study_arm(tmp_path, "c")


@pytest.mark.slow
def test_the_committed_default_experiment_is_what_the_code_gives(tmp_path, optimised_compile):
    """experiments/results/default (the docs' first table) against a fresh run of the default experiment: the
    metrics that are large agree to float32 rounding across CPUs; those at float32's floor (Federated-Clustering
    and Ground-truth reach ~1e-9) stay there."""
    import json

    from fedjax_clust.cli.commands import main

    assert main(["compare", "--out", str(tmp_path), "--no-progress"]) == 0
    fresh = json.loads((tmp_path / "results.json").read_text())
    committed = json.loads((ROOT / "experiments" / "results" / "default" / "results.json").read_text())
    assert list(fresh) == list(committed)
    for name, summary in committed.items():
        for metric in ("mean_sq_dist_to_optimum", "mean_loss"):
            if summary[metric] > 1.0:
                assert fresh[name][metric] == pytest.approx(summary[metric], rel=1e-3), (name, metric)
            else:
                assert fresh[name][metric] < 1e-6, (name, metric)
        # the hyperparameters, except the device count the run found (the CLI exposes every core; a test
        # process may hold fewer devices)
        same = {k: v for k, v in summary["hparams"].items() if k != "devices"}
        assert {k: v for k, v in fresh[name]["hparams"].items() if k != "devices"} == same


def fedjax_clust_commands():
    """Every ``fedjax-clust ...`` command of the docs' and the README's bash blocks (continuations joined,
    comments, environment prefixes and ``&&`` chains taken apart)."""
    for page in PAGES:
        for block in re.findall(r"(?ms)^```bash\n(.*?)^```", (ROOT / page).read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                for part in line.split(" #")[0].split("&&"):
                    words = part.split(" > ")[0].split()  # a redirection of the output is the shell's
                    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # WANDB_MODE=offline ...
                        words = words[1:]
                    if words and words[0] == "fedjax-clust":
                        yield pytest.param(page, " ".join(words), id=f"{page}: {' '.join(words[:4])}")


@pytest.mark.parametrize("page, command", list(fedjax_clust_commands()))
def test_every_documented_command_parses(page, command):
    """The documented commands name flags, choices and values the command line accepts (parsed, not run)."""
    import shlex

    from fedjax_clust.cli.commands import build_parser

    tokens = shlex.split(re.sub(r"\$\([^)]*\)", "X", command))[1:]
    if "--config" in tokens or "--resume" in tokens:  # the file (or the resumed run's run.json) gives what the
        # command requires; check the flags the line adds
        if "--algorithm" not in tokens:
            tokens += ["--algorithm", "local"]
        if "--out" not in tokens:
            tokens += ["--out", "x"]
    try:
        build_parser().parse_args(tokens)
    except SystemExit:
        pytest.fail(f"{page}: `{command}` does not parse")


def _module(path: pathlib.Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def experiment_commands():
    """Every ``python experiments/<script>.py ...`` line of the docs' and the README's bash blocks."""
    for page in PAGES:
        for block in re.findall(r"(?ms)^```bash\n(.*?)^```", (ROOT / page).read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                words = line.split(" #")[0].split(">")[0].split()
                if len(words) >= 2 and words[0] == "python" and words[1].startswith("experiments/"):
                    yield pytest.param(page, words[1:], id=f"{page}: {' '.join(words[1:3])}")


@pytest.mark.parametrize("page, words", list(experiment_commands()))
def test_every_documented_experiment_command_parses(page, words, tmp_path):
    """The docs' experiment-script commands name the script's real options (parsed with --write-config, which
    resolves the options and exits; reproduce.py lines with --list)."""
    import shlex

    script = ROOT / words[0]
    assert script.exists(), f"{page}: {words[0]} does not exist"
    args = shlex.split(" ".join(words[1:]))
    module = _module(script, f"_doc_cmd_{script.stem}")
    if script.name == "reproduce.py":
        assert module.main(args + ["--list"]) == 0
    else:
        try:
            status = module.main(args + ["--write-config", str(tmp_path / "c.toml")])
        except SystemExit as stop:  # some scripts exit from the parser once the config is written
            status = stop.code
        assert status in (0, None) and (tmp_path / "c.toml").exists()


def test_reproduce_lists_every_experiment_script_and_merges_quick_options(capsys):
    """experiments/reproduce.py: every experiment script has an entry, every entry's program exists, --quick
    replaces an option's value in place, and bad selections are one-line errors (exit 2)."""
    reproduce = _module(ROOT / "experiments" / "reproduce.py", "_reproduce_under_test")
    programs = {r.program for r in reproduce.REPRODUCTIONS}
    scripts = {p.name for p in (ROOT / "experiments").glob("*.py")} - {"reproduce.py"}
    assert scripts <= programs, f"scripts without a reproduce.py entry: {scripts - programs}"
    assert all((ROOT / "experiments" / p).exists() for p in programs - {"fedjax-clust"})
    assert reproduce._merge(["compare", "--rounds", "200", "--no-progress"], ["--rounds", "10", "--seeds", "1"]) == [
        "compare",
        "--rounds",
        "10",
        "--no-progress",
        "--seeds",
        "1",
    ]
    assert reproduce.main(["--list"]) == 0 and "table1-full" in capsys.readouterr().out
    for bad in (["--paper", "nope"], ["--only", "fig9"]):
        with pytest.raises(SystemExit) as stop:
            reproduce.main(bad)
        assert stop.value.code == 2 and "choose from" in capsys.readouterr().err
    default = reproduce.select(None, None, all_entries=False)
    assert all(r.needs is None for r in default) and len(default) < len(reproduce.REPRODUCTIONS)
    assert [r.name for r in reproduce.select(None, "cifar-fig2.4", all_entries=False)] == ["cifar-fig2.4"]


def test_reproduce_ledger_keeps_the_last_success_when_a_run_fails(tmp_path):
    import json

    reproduce = _module(ROOT / "experiments" / "reproduce.py", "_reproduce_ledger")
    ledger = lambda: json.loads((tmp_path / "reproduce.json").read_text())["entries"]
    reproduce.record(tmp_path, "fig3", {"command": "a", "status": 0, "seconds": 12.0, "quick": False})
    reproduce.record(tmp_path, "fig3", {"command": "b", "status": 2, "seconds": 0.1, "quick": False})
    kept = ledger()["fig3"]
    assert (kept["status"], kept["seconds"], kept["command"]) == (0, 12.0, "a")
    assert (kept["last_failure"]["status"], kept["last_failure"]["command"]) == (2, "b")
    reproduce.record(tmp_path, "fig3", {"command": "c", "status": 0, "seconds": 9.0, "quick": False})
    assert ledger()["fig3"]["seconds"] == 9.0 and "last_failure" not in ledger()["fig3"]
    reproduce.record(tmp_path, "fig1", {"command": "d", "status": 1, "seconds": 1.0, "quick": True})
    assert ledger()["fig1"]["status"] == 1 and ledger()["fig3"]["command"] == "c"
    # a study whose runs diverge by design exits 3 with every file written: complete for its entry only
    assert reproduce.BY_NAME["byzantine-study"].completed(3) and not reproduce.BY_NAME["fig3"].completed(3)
    reproduce.record(tmp_path, "byzantine-study", {"command": "e", "status": 0, "seconds": 5.0, "quick": False})
    reproduce.record(tmp_path, "byzantine-study", {"command": "f", "status": 3, "seconds": 6.0, "quick": False})
    assert ledger()["byzantine-study"]["command"] == "f" and "last_failure" not in ledger()["byzantine-study"]
    reproduce.record(tmp_path, "byzantine-study", {"command": "g", "status": 1, "seconds": 1.0, "quick": False})
    assert ledger()["byzantine-study"]["command"] == "f" and ledger()["byzantine-study"]["last_failure"]["status"] == 1


def _quick_entries() -> list:
    """The names of the reproduce.py entries that --quick runs (every CPU entry, and those with quick sizes), one
    per quick run: an entry whose quick run is an earlier entry's (``Reproduction.quick_run``: the same program
    and options) writes the same files, which that entry's test reads."""
    reproduce = _module(ROOT / "experiments" / "reproduce.py", "_reproduce_entries")
    runs = {}
    for r in reproduce.REPRODUCTIONS:
        if r.needs is None or r.quick:
            runs.setdefault(r.quick_run(), r.name)
    return list(runs.values())


def _results_without(root: pathlib.Path, name: str) -> pathlib.Path:
    """A results folder at ``root`` that links to every committed result under experiments/results except the
    entry ``name`` (a folder, or a file such as ``bench/robust.jsonl``) and the ledger: the entry's quick run
    writes there, and every docs block reads its files from that run and the rest from the committed ones."""
    results = ROOT / "experiments" / "results"
    top, _, inner = name.partition("/")
    root.mkdir(parents=True)
    for path in results.iterdir():
        if path.name.startswith(".") or path.name == "reproduce.json" or (path.name == top and not inner):
            continue
        if path.name == top:  # the folder of a nested entry (bench/): link its other files
            (root / top).mkdir()
            for file in path.iterdir():
                if file.name != inner:
                    (root / top / file.name).symlink_to(file)
        else:
            (root / path.name).symlink_to(path)
    return root


def test_every_committed_result_is_made_by_a_reproduce_entry():
    """Each file and folder under experiments/results (the ledger aside) is an entry of reproduce.py, so the
    per-entry quick runs below cover every file the docs' generated blocks read."""
    reproduce = _module(ROOT / "experiments" / "reproduce.py", "_reproduce_committed")
    names = set(reproduce.BY_NAME)
    results = ROOT / "experiments" / "results"
    committed = {p.name for p in results.iterdir() if p.name != "bench" and not p.name.startswith(".")}
    committed |= {f"bench/{p.name}" for p in (results / "bench").iterdir() if not p.name.startswith(".")}
    # accelerator/<device>/<date>/: reports made on a lent device (bench --suite accelerator), checked below;
    # test-suite/<date>.json: the suite's own fresh-clone times (tests/time_suite.py, test_suite_tools.py)
    device_made = {"reproduce.json", "accelerator", "test-suite"}
    assert committed - device_made <= names, committed - names - device_made


def test_every_committed_accelerator_report_reads_as_one():
    """Each experiments/results/accelerator/<device>/<date>/report.json has the report's keys, one row per
    target at most its target's name and unit, and renders as the docs' block."""
    import json

    from fedjax_clust.bench import accelerator

    tables = _module(DOCS / "tables.py", "_tables_accelerator")
    reports = sorted((ROOT / "experiments" / "results" / "accelerator").glob("*/*/report.json"))
    assert reports
    for path in reports:
        report = json.loads(path.read_text())
        assert {"command", "commit", "device", "rows", "costs", "complete"} <= set(report), path
        assert report["device"]["platform"] != "cpu" and not report["quick"], path
        for row in report["rows"]:
            assert row["unit"] == accelerator.TARGETS[row["name"]][3], (path, row["name"])
            assert row["status"] in ("pass", "fail", "skipped")
        if not report["complete"]:
            assert report.get("notes"), f"{path}: an incomplete report says why in its notes"
        block = tables.accelerator_report(
            ROOT / "experiments" / "results", str(path.parent.relative_to(ROOT / "experiments" / "results"))
        )
        assert report["device"]["kind"] in block


@pytest.mark.slow
@pytest.mark.parametrize("name", _quick_entries())
def test_reproduce_quick_makes_the_files_the_docs_tables_read(name, tmp_path, capsys):
    """``reproduce.py --quick --only NAME`` runs the entry at tiny sizes, records it in reproduce.json (strict
    JSON, a complete exit status), and every generated block of every page can be made with its output in place
    of the committed file (one test per entry, so the suite's workers share them); a second run into the same
    folder is refused (it never mixes two runs). The entries run ``--in-process`` (the test's worker keeps its
    JAX start-up and compiled programs from one entry to the next); ``fig2`` runs as its own process, the way
    reproduce.py runs entries by default."""
    import json

    reproduce = _module(ROOT / "experiments" / "reproduce.py", f"_reproduce_quick_{name}")
    tables = _module(DOCS / "tables.py", f"_tables_quick_{name}")
    results = _results_without(tmp_path / "results", name)
    how = [] if name == "fig2" else ["--in-process"]
    assert reproduce.main(["--quick", "--out", str(results), "--only", name, *how]) == 0, capsys.readouterr().err
    ledger = json.loads((results / "reproduce.json").read_text())["entries"]
    assert set(ledger) == {name} and ledger[name]["quick"] and reproduce.BY_NAME[name].completed(ledger[name]["status"])
    assert (results / name).exists() and not (results / name).is_symlink()
    for page in DOCS.rglob("*.md"):
        tables.regenerate(page.read_text(), results)  # raises where a block's file is missing or malformed
    if name == "fig2":
        assert reproduce.main(["--quick", "--out", str(results), "--only", name]) == 1


def test_the_model_sizes_in_the_images_guide_are_the_models():
    """The parameter counts the images guide quotes (rounded) are those of the built-in models."""
    from fedjax_clust.models import make_model

    text = (DOCS / "guides" / "images.md").read_text()
    for name, shape, classes in [
        ("cnn", (28, 28, 1), 10),
        ("lenet5", (28, 28, 1), 10),
        ("vgg8", (32, 32, 3), 100),
        ("vgg16", (32, 32, 3), 10),
        ("resnet9", (32, 32, 3), 10),
    ]:
        quoted = re.search(rf"`{name}` \([^)]*?(\d+(?:\.\d+)?)([MK])", text)
        assert quoted, f"images.md quotes no size for {name}"
        value = float(quoted.group(1)) * {"M": 1e6, "K": 1e3}[quoted.group(2)]
        digits = len(quoted.group(1).replace(".", "").lstrip("0"))
        assert abs(make_model(name, shape, classes).num_params() - value) <= 0.5 * 10 ** (
            len(str(int(value))) - digits
        ), (name, quoted.group(0))


def test_the_cli_page_quotes_the_run_defaults_the_parser_has():
    from fedjax_clust.cli.commands import build_parser

    run = build_parser().parse_args(["run", "--algorithm", "local", "--out", "x"])
    text = (DOCS / "cli.md").read_text()
    assert (
        f"rounds (default {run.rounds}), seed in [0, 2³²) (default {run.seed}), evaluate every k rounds "
        f"(default {run.eval_every})"
    ) in text


def test_the_srfca_claim_rows_say_what_was_not_run_or_never_finite(tmp_path):
    """The results page's SR-FCA rows: a run without Local or Global gives no verdict on "above Local and
    Global" (it was a "no" before), a run without SR-FCA makes no row, and a pair that is never finite on the
    same seed reads "no finite seed pair" (it printed a None mean)."""
    import json

    tables = _module(DOCS / "tables.py", "_tables_srfca_rows")

    def cell(*accuracies, mis=None):
        return {
            "test_accuracy": {
                "mean": None if None in accuracies else sum(accuracies) / len(accuracies),
                "seeds": list(accuracies),
            },
            "misclustering": {"mean": mis},
        }

    paper = {
        "accuracy": {
            "inverted": {"srfca": 92.03, "local": 76.52, "global": 88.61},
            "rotated": {"srfca": 91.66, "local": 85.55, "global": 80.88},
        }
    }
    results = {
        "inverted": {"srfca": cell(0.9, 0.91, 0.92, mis=0.0), "global": cell(0.8, 0.81, 0.83)},
        "rotated": {"local": cell(0.8, 0.8, 0.8)},
    }
    (tmp_path / "srfca").mkdir()
    (tmp_path / "srfca" / "srfca.json").write_text(json.dumps({"paper": paper, "results": results}))
    rows = tables._srfca_rows(tmp_path)
    assert len(rows) == 1  # rotated ran no SR-FCA
    claim, _, measured, verdict = rows[0]
    assert verdict == "not checked: Local not run" and "global 81.3%" in measured and "1 holds" in measured
    diff = tables.srfca_orderings({"srfca": cell(None, None), "local": cell(0.8, 0.8)}, {"srfca": 92.0, "local": 76.5})[
        0
    ][1]
    assert tables._difference_text(diff) == "no finite seed pair (2 seeds diverged)"


def test_srfca_orderings_take_the_papers_direction_and_judge_it_by_paired_seeds():
    """SR-FCA's table orderings: each pair is read in the direction of the paper's numbers (IFCA above SR-FCA
    where the paper has it higher), and judged by the paired interval over the seeds, not by the means."""
    tables = _module(DOCS / "tables.py", "_tables_srfca_orderings")

    def cell(*accuracies):
        return {"test_accuracy": {"seeds": list(accuracies)}}

    ours = {
        "srfca": cell(0.90, 0.91, 0.92, 0.93),
        "local": cell(0.80, 0.81, 0.82, 0.83),
        "ifca": cell(0.905, 0.90, 0.925, 0.925),
        "global": cell(0.95, 0.96, 0.97, 0.98),
    }
    paper = {"srfca": 91.66, "local": 85.55, "ifca": 91.80, "global": 80.88, "cfl": 80.47}
    got = {
        claim: (round(diff.difference.mean, 6), verdict) for claim, diff, verdict in tables.srfca_orderings(ours, paper)
    }
    assert got == {
        "SR-FCA > Local": (10.0, "holds"),
        "IFCA (Option I, true K) > SR-FCA": (-0.125, "within the seeds' spread"),
        "SR-FCA > Global": (-5.0, "fails"),
    }  # CFL: not run, no claim


def test_the_peers_command_parses_its_runners_and_tables_a_recorded_result(tmp_path):
    """experiments/peers.py without the peers installed: the result line a runner prints, the summary of its
    timings, the agreement of two round-1 models, and the ratios table of a small recorded result."""
    import numpy as np

    peers = _module(ROOT / "experiments" / "peers.py", "_peers_under_test")
    line = {
        "peer": "flower",
        "task": "synthetic",
        "clients": 100,
        "cohort": 100,
        "round_seconds": [3.0, 1.0, 2.0],
        "interface": "i",
        "resources": "r",
        "versions": {"flwr": "1.42.0"},
        "startup_seconds": 10.0,
    }
    parsed = peers.parse_result("noise\nPEER-RESULT " + json.dumps(line) + "\nmore noise\n")
    row = peers.summarise(parsed, process_seconds=20.0)
    assert row["round_seconds"] == 1.5 and row["first_round_seconds"] == 3.0  # the median after the first
    assert row["end_to_end_seconds"] == 16.0  # startup + every round
    with pytest.raises(ValueError, match="no result line"):
        peers.parse_result("Traceback ...\n")
    for name, shift in (("ours", 0.0), ("theirs", 1e-6)):
        (tmp_path / name).mkdir()
        np.savez(tmp_path / name / "round1.npz", p0=np.array([1.0, -2.0]) + shift, p1=np.array([0.5]))
    assert peers.agreement(tmp_path / "ours", tmp_path / "theirs") == pytest.approx(1e-6 / 2)
    ours = dict(row, peer="fedjax-clust", round_seconds=0.01, end_to_end_seconds=4.0)
    table = peers.markdown([ours, row, dict(row, peer="fedjax", status="timed out after 900 s")])
    assert "| synthetic | 100 | 100 | flower | 1.5 s (0.01 s) | 150x | 16 s (4 s) | 4.0x |" in table
    assert "timed out after 900 s" in table
    assert "start-up" not in table  # no runner reported its parts
    parts = {"imports": 0.9, "data": 0.01, "build": 0.05, "simulate_setup": 0.1, "compile": 0.3}
    table = peers.markdown([dict(ours, startup_parts=parts), row])
    assert "| task | N | cohort | imports | data | build | simulate setup | compile |" in table
    assert "| synthetic | 100 | 100 | 0.9 | 0.01 | 0.05 | 0.1 | 0.3 |" in table
