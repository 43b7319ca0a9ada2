"""Test-session settings that keep the suite's numbers independent of the machine it runs on, and the helpers
the test files share (import them with ``from conftest import ...``).

* Reference computations in the tests (``jax.grad`` of a loss, direct primitive calls) run at full float32
  matmul precision, as the package's algorithms do by default: on a GPU JAX's default is TF32, which made
  float32 comparisons fail there.
* Subprocesses (the CLI tests, the sharding test) must not each reserve 75% of a GPU's memory.
* On a GPU the resume tests need XLA's deterministic ops: the session turns them on before JAX starts, as
  a user of the Python API does (``XLA_FLAGS = fedjax_clust.deterministic_xla_flags()``; the library never does),
  and every subprocess inherits them through ``XLA_FLAGS``.
* Compiled programs are shared through JAX's persistent compilation cache, in a folder made for this test
  session (the pytest process that starts first makes it; its xdist workers and every subprocess inherit it
  through ``JAX_COMPILATION_CACHE_DIR``) and removed at the end: many tests compile the same small rounds, and
  reusing them cut the wall time of test_algorithms.py + test_run_folder.py by a third. A cached executable is
  the one the same program would compile to, so no number depends on it. To keep the cache between runs (a
  second run of the suite then reads most programs instead of compiling them), name a folder:
  ``FEDJAX_CLUST_TEST_JAX_CACHE=~/.cache/fedjax-clust/test-jax python -m pytest -q``; the session uses its
  sub-folder for this jax / jaxlib / ``XLA_FLAGS`` (:func:`fedjax_clust.parallel.compile_cache.keyed_cache_dir`)
  and never deletes it.
* XLA's backend (LLVM) optimisation level is 0 in the session and its subprocesses: JAX's
  ``jax_disable_most_optimizations`` (set through ``JAX_DISABLE_MOST_OPTIMIZATIONS=1``, which every subprocess
  inherits whatever ``XLA_FLAGS`` it is given; not when the caller's ``XLA_FLAGS`` names a level: theirs wins)
  compiles every program with ``xla_backend_optimization_level=0`` and LLVM's expensive passes off. The suite's
  programs are tiny and compiling them is most of its time (a Federated-Clustering round at N = 256 compiled in
  15 s at XLA's default level, 3.5 s at 0, on 2 cores; test_sweep.py + test_algorithms.py ran 24% faster).
  The level changes how fast the generated code runs, not what it computes: the optimised HLO, its fusions
  and their order of operations are the same, and without fast-math flags (XLA's CPU default) LLVM keeps
  float operations as written at every level; the suite's exact comparisons pass at both levels. A test that
  computes more than it compiles takes the ``optimised_compile`` fixture, which turns the switch off while it
  runs (the default experiment: 16 s at level 0, 8 s optimised).
* XLA:CPU's older fusion code generator (``--xla_cpu_use_fusion_emitters=false``, in ``XLA_FLAGS`` for the
  session and its subprocesses) compiles the suite's programs about 2.4x faster (test_contract.py: 73 s of
  compiling down to 30 s; compiling was 54% of the whole suite's time, 2026-12-03). It computes the same HLO;
  its fusions may order a reduction's additions differently, so a number may differ from the default
  generator's in its last float32 bits: within every tolerance of the suite, which must hold on any CPU and on
  a GPU anyway. A test whose bit-for-bit claim about two programs the older generator does not keep (host rows
  against resident rows: the fedavg family's differ under it; the radix against the search selection) is marked
  ``default_codegen``: its programs compile with the default generator (a per-compile override,
  ``default_codegen`` below), so the suite checks those claims on what a user's default build computes; the
  other bit-for-bit tests (a mapped sweep against simulate, resumes) hold on both. Not when the caller's
  ``XLA_FLAGS`` name the generator, or ``FEDJAX_CLUST_TEST_DEFAULT_CODEGEN=1`` (the whole suite on the default
  generator, as a user runs; about 1.5x the time), or this XLA does not know the flag (a subprocess probes it
  once).
"""

import collections
import os
import shutil
import tempfile

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from fedjax_clust.parallel.compile_cache import keyed_cache_dir  # noqa: E402
from fedjax_clust.parallel.determinism import deterministic_xla_flags  # noqa: E402

_SESSION_VAR = "_FEDJAX_CLUST_TEST_SESSION"  # set by the session's first process; xdist workers inherit it
_CACHE_VAR = "FEDJAX_CLUST_TEST_JAX_CACHE"
_FAST_COMPILE_VAR = "JAX_DISABLE_MOST_OPTIMIZATIONS"
_DEFAULT_CODEGEN_VAR = "FEDJAX_CLUST_TEST_DEFAULT_CODEGEN"
_OLD_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _xla_knows(flag: str) -> bool:
    """Whether this jaxlib's XLA accepts ``flag`` in XLA_FLAGS (an unknown flag aborts the process that reads it:
    probed in a subprocess)."""
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    probe = [sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"]
    return subprocess.run(probe, env=env, capture_output=True).returncode == 0


_FIRST = _SESSION_VAR not in os.environ
_OWNS_CACHE = _FIRST and _CACHE_VAR not in os.environ
if _FIRST:
    os.environ[_SESSION_VAR] = "1"
    _flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in _flags:  # a level the caller gave wins
        os.environ.setdefault(_FAST_COMPILE_VAR, "1")
    if (
        "xla_cpu_use_fusion_emitters" not in _flags
        and os.environ.get(_DEFAULT_CODEGEN_VAR, "0") in ("", "0")
        and _xla_knows(_OLD_EMITTERS)
    ):
        _flags = f"{_flags} {_OLD_EMITTERS}".strip()
    os.environ["XLA_FLAGS"] = deterministic_xla_flags(_flags)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = (
        tempfile.mkdtemp(prefix="fedjax-clust-jax-cache-") if _OWNS_CACHE else keyed_cache_dir(os.environ[_CACHE_VAR])
    )
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"

import jax  # noqa: E402
import pytest  # noqa: E402
from jax_timing import pytest_addoption, pytest_configure  # noqa: E402,F401  (--timing-log FILE)

jax.config.update("jax_default_matmul_precision", "highest")
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


@pytest.fixture
def optimised_compile():
    """XLA's default optimisation level while the test runs (module docstring): for a test whose time is running
    compiled programs, not compiling them."""
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture(autouse=True)
def default_codegen(request):
    """A test marked ``default_codegen`` compiles with XLA:CPU's default fusion code generator while it runs
    (module docstring): its claims are bit-for-bit, which the session's faster generator would not keep. Programs
    it reads from the persistent cache are keyed by the option too."""
    if request.node.get_closest_marker("default_codegen") is None or _OLD_EMITTERS not in os.environ["XLA_FLAGS"]:
        yield
        return
    from jax._src import compiler

    original = compiler.get_compile_options

    def with_default_emitters(*args, **kwargs):
        options = original(*args, **kwargs)
        options.env_option_overrides = [*options.env_option_overrides, ("xla_cpu_use_fusion_emitters", True)]
        return options

    compiler.get_compile_options = with_default_emitters
    try:
        yield
    finally:
        compiler.get_compile_options = original


# The fast tier's registered algorithms, one of each kind of round: Federated-Clustering (threshold
# clustering of the N x N cross-gradient table), Global (a fixed group table), IFCA-2 (clusters chosen by
# loss, several models, local steps), Ditto (a personal model next to a global one) and CFL (recursive splits).
# A test run over every algorithm runs these in the fast tier and the rest in the slow tier (`tiered`).
FAST_ALGORITHMS = ("federated-clustering", "global", "ifca-2", "ditto", "cfl")
# fedavg with another server optimiser fixed: the same round program as fedavg's but for the server step, whose
# math test_fedavg.py checks against Reddi et al.'s Algorithm 2 for each. The parametrisations over every
# algorithm that compile a program per case (contract, participation, ragged data, image models) run fedavg
# and fedprox and leave these out (`distinct`), what would otherwise add about a minute to the suite.
SERVER_PRESETS = ("fedavgm", "fedadagrad", "fedadam", "fedyogi")


def distinct(names):
    """``names`` without the :data:`SERVER_PRESETS`."""
    return tuple(n for n in names if n not in SERVER_PRESETS)


def tiered(names, fast=FAST_ALGORITHMS):
    """``names`` as pytest parameters, those not in ``fast`` marked ``slow``: the whole suite (``.ci/run``)
    runs every one, the fast tier (``-m "not slow"``) the representatives. For the parametrisations whose
    every case compiles its own programs (one algorithm each), where most of the fast tier's time went."""
    fast = set(fast)
    return [name if name in fast else pytest.param(name, marks=pytest.mark.slow) for name in names]


def run_experiment(script: str, argv: list) -> int:
    """``experiments/<script>``'s ``main(argv)`` in this process, from the repository root as the script runs
    from the command line (the process itself is not what such a test checks: it would only add a JAX start-up
    and a cold compile); its exit status, a parser's ``SystemExit`` code included. The caller reads what it
    printed with ``capsys``."""
    import importlib.util
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    path = root / "experiments" / script
    spec = importlib.util.spec_from_file_location(f"_experiment_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        status = module.main(list(argv))
    except SystemExit as stop:
        status = stop.code
    finally:
        os.chdir(cwd)
    return 0 if status is None else status


def run_rounds(algo, task, rounds, *, state=None, seed=None):
    """``rounds`` jitted rounds of ``algo`` on ``task``, from its initial state unless ``state`` is given;
    round t's key is PRNGKey(t), or fold_in(PRNGKey(seed), t). Returns (state, the last round's metrics)."""
    state = algo.init(task.init_params(None), task.num_clients) if state is None else state
    step = jax.jit(algo.round)
    metrics = None
    for t in range(rounds):
        key = jax.random.PRNGKey(t) if seed is None else jax.random.fold_in(jax.random.PRNGKey(seed), t)
        state, metrics = step(state, task.data, key)
    return state, metrics


def primitive_counts(jaxpr, counts=None):
    """{primitive name: occurrences} in ``jaxpr`` and every sub-jaxpr (cond branches, loop bodies, calls)."""
    counts = collections.Counter() if counts is None else counts
    for eqn in jaxpr.eqns:
        counts[eqn.primitive.name] += 1
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            primitive_counts(sub, counts)
    return counts


def pytest_unconfigure(config):
    if _OWNS_CACHE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
