"""``fedjax-clust bench --model attack-switch``: the switching program against a program per attack kind."""

import pytest

from fedjax_clust.bench import attack_switch
from fedjax_clust.cli.commands import main


def test_the_benchmark_counts_one_program_against_one_per_kind_with_equal_runs():
    rows = list(
        attack_switch.run_attack_switch_benchmark(
            algorithms=("global",),
            batchings=("map",),
            attacks=("sign-flip", "alie", "ipm"),
            fractions=(0.25, 0.5),
            clients_per_cluster=4,
            rounds=2,
            repeats=1,
        )
    )
    assert len(rows) == 1
    row = rows[0]
    assert row["per_kind"]["programs"] == 3 and row["switched"]["programs"] == 1
    assert row["same_nonfinite"] and row["max_relative_difference"] < 1e-5
    assert row["ratio"] == pytest.approx(row["switched"]["seconds"] / row["per_kind"]["seconds"])
    assert row["compile_cache"] == attack_switch.active_cache_dir()  # the session's own cache, recorded
    for way in ("per_kind", "switched"):
        assert row[way]["run_seconds"] == pytest.approx(row[way]["seconds"] - row[way]["compile_seconds"], abs=0.5)
    assert main(["bench", "--model", "attack-switch", "--clients", "10"]) == 2
    assert main(["bench", "--model", "linear", "--quick"]) == 2  # --quick: the suites and this model only
