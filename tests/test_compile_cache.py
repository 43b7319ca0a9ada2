"""The kept compilation cache's folder (fedjax_clust.parallel.compile_cache): one sub-folder per installed jax,
jaxlib and XLA_FLAGS, computed without importing JAX or touching the disk."""

import importlib.metadata
import os

import pytest

from fedjax_clust.parallel.compile_cache import cache_key, keyed_cache_dir


def test_the_key_names_the_versions_and_hashes_the_flags_in_order():
    key = cache_key("--a=1 --b=2")
    jax, jaxlib = importlib.metadata.version("jax"), importlib.metadata.version("jaxlib")
    assert key.startswith(f"jax-{jax}_jaxlib-{jaxlib}_xla-") and len(key.rsplit("-", 1)[1]) == 12
    assert cache_key("  --a=1   --b=2 ") == key  # blanks do not matter
    assert cache_key("--b=2 --a=1") != key and cache_key("--a=1") != key  # order and content do
    assert cache_key("") != key


def test_a_missing_distribution_is_named_none_in_the_key(monkeypatch):
    real = importlib.metadata.version

    def version(name):
        if name == "jaxlib":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert "_jaxlib-none_" in cache_key("")


def test_the_key_reads_xla_flags_from_the_environment(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    assert cache_key() == cache_key("--xla_cpu_enable_fast_math=false")
    monkeypatch.delenv("XLA_FLAGS")
    assert cache_key() == cache_key("")


def test_the_folder_is_the_root_joined_with_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = keyed_cache_dir("~/cache", "--x=1")
    assert folder == os.path.join(str(tmp_path), "cache", cache_key("--x=1"))
    assert not (tmp_path / "cache").exists()  # computed, not made
    with pytest.raises(ValueError, match="root"):
        keyed_cache_dir("  ")


def test_this_session_compiles_into_its_keyed_folder_when_one_is_kept():
    """conftest.py: with FEDJAX_CLUST_TEST_JAX_CACHE set, the session's cache is its keyed sub-folder (the
    session's own XLA_FLAGS); without, a temporary folder of this session."""
    import jax

    folder = jax.config.jax_compilation_cache_dir
    assert folder == os.environ["JAX_COMPILATION_CACHE_DIR"]
    kept = os.environ.get("FEDJAX_CLUST_TEST_JAX_CACHE")
    if kept:
        assert folder == keyed_cache_dir(kept)
    else:
        assert os.path.basename(folder).startswith("fedjax-clust-jax-cache-")


def test_the_programs_cache_root_follows_the_option_then_the_environment():
    from fedjax_clust.parallel.compile_cache import DEFAULT_ROOT, cache_root

    assert cache_root(None, {}) == DEFAULT_ROOT
    assert cache_root(None, {"FEDJAX_CLUST_COMPILE_CACHE": "/x"}) == "/x"
    assert cache_root("/y", {"FEDJAX_CLUST_COMPILE_CACHE": "/x"}) == "/y"  # the option wins
    for off in ("off", "OFF", "none", "0", "false", "", "  "):
        assert cache_root(None, {"FEDJAX_CLUST_COMPILE_CACHE": off}) is None, off
        assert cache_root(off, {}) is None, off


def _run(tmp_path, name, *flags, env=None):
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"} if env is None else env
    out = tmp_path / name
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedjax_clust.cli",
            *flags,
            "run",
            "--algorithm",
            "federated-clustering",
            "--clients-per-cluster",
            "8",
            "--rounds",
            "6",
            "--eval-every",
            "3",
            "--no-progress",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    metrics = (out / "metrics.jsonl").read_text()
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    return metrics, run["provenance"]["compile_cache"], summary


def test_the_command_line_caches_its_programs_and_no_number_depends_on_it(tmp_path):
    """fedjax-clust's own process turns JAX's persistent cache on (--compile-cache DIR): the first run writes its
    programs into DIR's keyed folder, the second reads them, and both write the metrics a run without a cache
    (--compile-cache off, or FEDJAX_CLUST_COMPILE_CACHE=off) writes, byte for byte; run.json names the folder."""
    root = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    cold, folder, first = _run(tmp_path, "cold", "--compile-cache", str(root))
    assert folder == os.path.join(str(root), cache_key(env.get("XLA_FLAGS", "")))
    entries = set(os.listdir(folder))
    assert entries  # the run's programs, written
    warm, again, second = _run(tmp_path, "warm", "--compile-cache", str(root))
    assert again == folder and warm == cold
    assert second["compiled_programs"] == first["compiled_programs"]  # the same programs, read back
    off, none, _ = _run(tmp_path, "off", "--compile-cache", "off")
    assert none is None and off == cold
    by_env, none, _ = _run(tmp_path, "env", env={**env, "FEDJAX_CLUST_COMPILE_CACHE": "off"})
    assert none is None and by_env == cold


def test_an_experiment_script_run_as_a_program_caches_its_programs(tmp_path):
    """experiments/*.py run as programs turn the cache on as the command does (experiment_args): the folder is
    the option's keyed one, its results' provenance names it, and the same script with --compile-cache off
    writes the same numbers; called as main(argv) from Python the process keeps its settings."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    results = {}
    for name, option in (("cached", str(tmp_path / "cache")), ("off", "off")):
        out = tmp_path / name
        done = subprocess.run(
            [
                sys.executable,
                os.path.join(root, "experiments", "clipping_iterations.py"),
                "--out",
                str(out),
                "--repeats",
                "1",
                "--iterations",
                "4",
                "--compile-cache",
                option,
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        results[name] = json.loads((out / "clipping.json").read_text())
    folder = os.path.join(str(tmp_path / "cache"), cache_key(env.get("XLA_FLAGS", "")))
    assert results["cached"]["provenance"]["compile_cache"] == folder and os.listdir(folder)
    assert results["off"]["provenance"]["compile_cache"] is None
    assert results["cached"]["sigmas"] == results["off"]["sigmas"]
