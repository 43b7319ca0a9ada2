"""The round progress bar leaves compilation out of its rate and time left (issue: a rate frozen at the first,
compiling call)."""

import time

from fedjax_clust.io.progress import RoundProgress


def test_the_clock_restarts_after_the_compiling_chunk(capsys):
    bar = RoundProgress(100, "fc")
    assert "(compiling)" in bar.bar.desc
    time.sleep(0.6)  # the first chunk: compilation
    bar.update(2)
    bar.set_postfix({"loss": "0.5"})
    for _ in range(3):
        bar.update(5)
    shown = bar.bar.format_dict
    assert bar.n == 17 and shown["n"] == 17 and shown["initial"] == 2 and shown["prefix"] == "fc"
    assert shown["elapsed"] < 0.5  # the compiling chunk's 0.6 s are not in the rate
    assert shown["rate"] is None  # smoothing 0: the rate is (n - initial) / elapsed, the mean since the restart
    assert "loss=0.5" in str(bar.bar)
    bar.close()
    assert bar.bar is None


def test_resumed_and_disabled_bars():
    with RoundProgress(10, "x", initial=4) as bar:
        assert bar.bar.n == 4
        bar.update(1)
        assert bar.bar.n == 5 and bar.bar.initial == 5
    off = RoundProgress(10, "x", enabled=False)
    off.update(3)
    off.set_postfix({"a": 1})
    off.close()
    assert off.n == 3 and off.bar is None
