"""The habits CI holds the repository to (issues 34, 67): ruff's lint and format check clean on every file of the
repository it reads (the package, tests, experiments, notebooks, docs' scripts and the README's code blocks; rules
in pyproject.toml's [tool.ruff]), and the type checker's "no new errors" rule against its committed baseline
(.ci/typecheck.py, mypy with [tool.mypy])."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean_on_the_repository(command):
    done = subprocess.run([sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.slow  # mypy over the package: about a minute on 2 cores
def test_the_type_checker_finds_no_error_outside_the_baseline():
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "typecheck.py")], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "no new errors" in done.stdout


# The layering of fedjax_clust/__init__.py's docstring, bottom rows first: a module imports only from its own
# row or the rows below it (core/ parallel/ io/ are the shared vocabulary at the bottom, cli/ the top).
LAYERS = [
    {"core", "parallel", "io"},
    {"incentives"},
    {"ops"},
    {"data", "models"},
    {"privacy", "robust"},
    {"tasks"},
    {"algorithms"},
    {"run"},
    {"cost"},
    {"bench"},
    {"cli"},
]


def test_every_module_imports_only_from_its_row_or_below():
    """Absolute imports only; every subpackage has a row; ``from fedjax_clust import X`` counts as an import
    of the module the package's lazy name map takes X from."""
    import ast

    import fedjax_clust

    rank = {package: i for i, row in enumerate(LAYERS) for package in row}
    subpackages = {p.name for p in (ROOT / "fedjax_clust").iterdir() if (p / "__init__.py").exists()}
    assert subpackages == set(rank), subpackages ^ set(rank)
    wrong = []
    for path in sorted((ROOT / "fedjax_clust").rglob("*.py")):
        parts = path.relative_to(ROOT / "fedjax_clust").parts
        if len(parts) < 2:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                wrong.append(f"{'/'.join(parts)}: relative import")
                continue
            if isinstance(node, ast.ImportFrom) and node.module == "fedjax_clust":
                names = [fedjax_clust._PUBLIC.get(a.name, f"fedjax_clust.{a.name}") for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                target = name.split(".")
                if (
                    target[0] == "fedjax_clust"
                    and len(target) > 1
                    and target[1] in rank
                    and rank[target[1]] > rank[parts[0]]
                ):
                    wrong.append(f"{'/'.join(parts)} imports {name}")
    assert not wrong, wrong


def test_only_the_validation_module_asks_whether_a_value_is_traced():
    """The kernels take traced values (a sweep's per-run hyperparameters, ranks computed in a round) without
    inspecting them: the one question "is this traced?" lives in core/validation.is_traced (issue 34)."""
    askers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "fedjax_clust").rglob("*.py")
        if "Tracer" in path.read_text() and path.name != "validation.py"
    )
    assert askers == []


@pytest.mark.parametrize("value", [0.0, 0, 0.5])
def test_a_traced_momentum_takes_the_steps_of_a_concrete_one(value):
    """client_optimizer keeps a buffer for an array momentum (what a sweep traces) even at 0 and takes the
    same steps as with the plain number."""
    import jax
    import jax.numpy as jnp

    from fedjax_clust.core.optim import client_optimizer

    params = jnp.asarray([1.0, -2.0])
    grads = [jnp.asarray([0.5, 0.25]), jnp.asarray([-1.0, 2.0]), jnp.asarray([0.125, 0.0])]

    def steps(momentum):
        opt = client_optimizer(0.1, momentum)
        p, s = params, opt.init(params)
        for g in grads:
            u, s = opt.update(g, s, p)
            p = p + u
        return p

    concrete = steps(value)
    traced = jax.jit(steps)(jnp.float32(value))
    assert jnp.array_equal(concrete, traced)


def test_no_module_of_the_package_is_over_700_lines():
    """A module holds one idea (issue 67): past 700 lines it holds several; split it along its seams."""
    long = {
        str(path.relative_to(ROOT)): lines
        for path in (ROOT / "fedjax_clust").rglob("*.py")
        if path.name != "_stored_help.py" and (lines := len(path.read_text().splitlines())) > 700
    }
    assert long == {}


def test_plugins_load_through_the_one_registry_type():
    """Entry points are read in one place, fedjax_clust.core.registry (one failure rule for every registry); the
    stored help texts only ask whether any plugin is installed."""
    readers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "fedjax_clust").rglob("*.py")
        if "entry_points(" in path.read_text()
    )
    assert readers == ["fedjax_clust/cli/help_texts.py", "fedjax_clust/core/registry.py"]


def test_no_module_imports_another_modules_private_name():
    """A name with a leading underscore belongs to its module: a module that needs another's helper imports a
    public name (issue 67: the module splits had left private names crossing their new borders)."""
    import ast

    crossing = []
    for path in (ROOT / "fedjax_clust").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedjax_clust"):
                crossing += [
                    f"{path.relative_to(ROOT)}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert crossing == []


def test_no_public_function_takes_more_than_twelve_named_parameters():
    """Issue 67's bound (optax: 3 of 1,501 functions over it; pfl-research: none): options that travel together
    are one record (an option group, a driver's Evaluation / Output, ...). Counted as the issue counts: every
    named parameter but self / cls, and a ``**legacy`` (or any ``**kwargs``) as one; public functions and methods
    of public classes in public modules."""
    import ast

    def public(path):
        return not any(part.startswith("_") and part != "__init__.py" for part in path.relative_to(ROOT).parts)

    long = []

    def visit(node, where, exposed):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                count = len(names) + (a.kwarg is not None)
                if exposed and not child.name.startswith("_") and count > 12:
                    long.append(f"{where}{child.name}: {count}")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{where}{child.name}.", exposed and not child.name.startswith("_"))

    for path in (ROOT / "fedjax_clust").rglob("*.py"):
        visit(ast.parse(path.read_text()), f"{path.relative_to(ROOT)}:", public(path))
    assert long == []
