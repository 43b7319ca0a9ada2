"""The round progress bar leaves compilation out of its rate and time left (issue: a rate frozen at the first,
compiling call)."""

import time

from fedjax_clust.io.progress import RoundProgress


def test_the_clock_restarts_after_the_compiling_chunk(capsys):
    bar = RoundProgress(100, "fc", plain=False)
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
    with RoundProgress(10, "x", initial=4, plain=False) as bar:
        assert bar.bar.n == 4
        bar.update(1)
        assert bar.bar.n == 5 and bar.bar.initial == 5
    off = RoundProgress(10, "x", enabled=False)
    off.update(3)
    off.set_postfix({"a": 1})
    off.close()
    assert off.n == 3 and off.bar is None


def test_plain_lines_where_no_terminal_reads_them(monkeypatch):
    """Piped to a log (pytest's captured stderr is no terminal), the bar writes one line per update, no carriage
    returns; the rate leaves the compiling chunk out; lines come at most every PLAIN_EVERY_S, the last always."""
    import io

    import fedjax_clust.io.progress as progress

    log = io.StringIO()
    bar = RoundProgress(30, "fc", stream=log)
    assert bar.plain and bar.bar is None
    time.sleep(0.3)
    bar.update(10)  # compiled: 0.3 s are not in the rate
    bar.set_postfix({"test_accuracy": "0.91"})
    bar.update(10)
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    bar.update(10)
    bar.close()
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 60.0)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 3, lines  # the middle update came within PLAIN_EVERY_S
    assert lines[0] == "fc: round 0/30 (compiling)"  # said when it starts, before the silent first stretch
    assert lines[1].startswith("fc: round 10/30 (compiled and ran in")
    assert (
        lines[2].startswith("fc: round 30/30, ") and "rounds/s" in lines[2] and lines[2].endswith("test_accuracy=0.91")
    )
    rate = float(lines[2].split(", ")[1].split()[0])
    assert rate > 1000  # 20 rounds in microseconds: the 0.3 s compile is not in it
    early = io.StringIO()
    stopped = RoundProgress(30, "x", stream=early)
    stopped.update(10)
    stopped.update(5)  # within PLAIN_EVERY_S of the first line (patched to 0 above: set it back)
    stopped.close()
    assert early.getvalue().splitlines()[-1].startswith("x: round 15/30")  # close() writes the last rounds' line
    quiet = io.StringIO()
    RoundProgress(5, "x", stream=quiet, enabled=False).update(5)
    assert quiet.getvalue() == ""
