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
