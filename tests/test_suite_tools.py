"""The tools that say where the suite's time goes and how long it takes: the timing log's per-test tally
(tests/jax_timing.py), its summary (tests/slowest.py), the fresh-clone timer's log parsing (tests/time_suite.py)
and the README sentence docs/tables.py makes from the timer's JSON."""

import importlib.util
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import slowest
import time_suite
from jax_timing import _ProgramLog, _Tally

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_tally_counts_a_new_programs_tracing_lowering_and_compiling():
    tally = _Tally()
    jax.monitoring.register_event_duration_secs_listener(tally.on_duration)
    try:
        tally.take()
        jax.block_until_ready(jax.jit(lambda x: jnp.sin(x) * 3.0 + x)(np.arange(7.0, dtype=np.float32)))  # one program
        taken = tally.take()
    finally:
        jax.monitoring.unregister_event_duration_listener(tally.on_duration)
    assert taken["programs"] == 1
    assert taken["trace"] > 0 and taken["lower"] > 0 and taken["compile"] > 0
    assert tally.take() == {}  # take() starts the next test from zero


def test_slowest_keeps_a_tests_last_line_and_sums_files_and_the_total(tmp_path, capsys):
    log = tmp_path / "timing.jsonl"
    lines = [
        {"test": "tests/test_a.py::one", "seconds": 9.0, "compile": 5.0, "programs": 3},
        {"test": "tests/test_a.py::two", "seconds": 2.0, "trace": 1.0, "programs": 1, "cache_hits": 1},
        {"test": "tests/test_b.py::three", "seconds": 4.0},
        {"test": "tests/test_a.py::one", "seconds": 3.0, "compile": 1.0, "programs": 2},
    ]  # a rerun
    log.write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n")
    rows = slowest.read(log)
    assert sorted(r["seconds"] for r in rows) == [2.0, 3.0, 4.0]
    assert slowest.main([str(log), "--top", "2", "--files", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    tests = out[out.index("the 2 slowest tests") + 2 :][:2]
    assert tests[0].endswith("tests/test_b.py::three") and tests[1].endswith("tests/test_a.py::one")
    file_a = next(line for line in out if line.endswith("tests/test_a.py (2)"))
    assert file_a.split()[0] == "5.0" and file_a.split()[5:7] == ["3", "1"]  # seconds, programs, hits summed
    assert out[-1].split()[0] == "9.0" and out[-1].endswith("all 3 tests (summed over the workers)")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert slowest.main([str(empty)]) == 2


def test_the_program_log_tells_programs_apart_by_their_constants_and_shapes(tmp_path, capsys):
    path = tmp_path / "programs.jsonl"
    log = _ProgramLog(str(path))
    try:
        log.test = "tests/test_x.py::one"
        for scale, size in ((2.5, 5), (7.25, 5), (2.5, 9)):  # another constant, then another shape
            jax.block_until_ready(jax.jit(lambda x, s=scale: jnp.tanh(x) * s)(np.ones(size, np.float32)))
    finally:
        log.close()
    first, other_number, other_shape = slowest.read_programs(path)
    assert {p["name"] for p in (first, other_number, other_shape)} == {"jit__lambda"}
    assert first["test"] == "tests/test_x.py::one" and first["seconds"] > 0
    assert len({p["exact"] for p in (first, other_number, other_shape)}) == 3
    assert first["numbers"] == other_number["numbers"] != other_shape["numbers"]
    assert first["structure"] == other_number["structure"] == other_shape["structure"]
    jax.block_until_ready(jax.jit(lambda x: jnp.cos(x) + 1.5)(np.ones(4, np.float32)))  # closed: not logged
    assert len(slowest.read_programs(path)) == 3

    synthetic = [
        dict(name="a", seconds=2.0, hit=False, exact="1", numbers="n", structure="s"),
        dict(name="a", seconds=3.0, hit=False, exact="2", numbers="n", structure="s"),  # other numbers
        dict(name="a", seconds=4.0, hit=True, exact="2", numbers="n", structure="s"),  # a cache read
        dict(name="b", seconds=5.0, hit=False, exact="3", numbers="m", structure="s"),
    ]  # other shapes
    assert slowest.repeated_seconds(synthetic, "numbers") == (1, 3.0)
    assert slowest.repeated_seconds(synthetic, "structure") == (2, 8.0)
    synthetic_log = tmp_path / "synthetic.jsonl"
    synthetic_log.write_text("".join(json.dumps(p) + "\n" for p in synthetic))
    assert slowest.main(["--programs", str(synthetic_log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].split() == ["9.0", "2", "1", "2", "a"]  # seconds, compiles, hits, distinct programs
    assert "4 programs handed to XLA in 14.0 s" in out[-3] and "3 compiled, 1 read" in out[-3]
    assert out[-2].endswith("1 programs, 3.0 s (21%)") and out[-1].endswith("2 programs, 8.0 s (57%)")


def test_the_timer_reads_pytests_last_summary_line():
    log = "....\n== 1 failed, 3 passed in 9.00s ==\n....\n1520 passed, 2 skipped, 5 warnings in 1481.41s (0:24:41)\n"
    assert time_suite.passed(log) == (1520, 1481.41)
    assert time_suite.passed("1403 passed, 1 warning in 196.50s (0:03:16)") == (1403, 196.5)
    with pytest.raises(ValueError, match="summary"):
        time_suite.passed("error: no tests ran")


def _tables():
    spec = importlib.util.spec_from_file_location("docs_tables_suite", ROOT / "docs" / "tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    return tables


def test_the_readme_sentence_is_the_newest_records_numbers(tmp_path):
    def record(date, cold):
        run = lambda seconds, tests: {"wall_seconds": seconds + 90.0, "test_seconds": seconds, "tests": tests}  # noqa
        return {
            "commit": "0123456789abcdef",
            "date": date,
            "cpus": 2,
            "python": "3.11.9",
            "full": {"cold": run(cold, 1525), "warm": run(600.0, 1525), "cache_key": ["jax-x"]},
            "fast": {"cold": run(570.0, 1403), "warm": run(198.0, 1403), "cache_key": ["jax-x"]},
        }

    (tmp_path / "test-suite").mkdir()
    (tmp_path / "test-suite" / "2026-01-02.json").write_text(json.dumps(record("2026-01-02", 1080.0)))
    (tmp_path / "test-suite" / "2026-01-01.json").write_text(json.dumps(record("2026-01-01", 3000.0)))
    text = _tables().test_suite_times(tmp_path)
    assert "2 CPU cores" in text and "2026-01-02, commit 0123456" in text
    assert "1,525 tests take 18.0 min on a cold start and 10.0 min warm" in text
    assert "install another 1.5 min" in text and "1,403 tests take 9.5 min cold and 3.3 min warm" in text
    assert "2026-01-01" in _tables().test_suite_times(tmp_path, "test-suite/2026-01-01.json")
    with pytest.raises(FileNotFoundError, match="time_suite"):
        _tables().test_suite_times(tmp_path / "nothing")


def test_every_committed_suite_timing_reads_as_one():
    results = ROOT / "experiments" / "results"
    found = sorted((results / "test-suite").glob("*.json"))
    assert found
    for path in found:
        record = json.loads(path.read_text())
        assert path.stem == record["date"] and len(record["commit"]) == 40
        for tier in ("full", "fast"):
            assert record[tier]["warm"]["tests"] == record[tier]["cold"]["tests"]
        assert record["fast"]["cold"]["tests"] < record["full"]["cold"]["tests"]
        assert record["date"] in _tables().test_suite_times(results, f"test-suite/{path.name}")
