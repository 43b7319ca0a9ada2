"""A progress bar over rounds whose rate and time left leave compilation out.

The first call of a jitted round compiles it: timing it with the rounds after it made tqdm show a rate frozen at
that first call (``1/100 [00:06<11:19]`` for a run that then finishes in seconds). :class:`RoundProgress` shows
the first chunk of rounds as ``(compiling)``, then restarts the clock: the rate is the mean over the rounds run
since, (n - n_0) / (t - t_0), and the bar is redrawn on every update (at most 10 times a second).

Where the output is no terminal (a log file, CI, a pipe) carriage-return frames would pile up into one line
of tens of kilobytes: there the bar writes ``fc: round 0/300 (compiling)`` when it starts, then one plain
line per update (at most one every ``PLAIN_EVERY_S`` seconds, and always the last), e.g. ``fc: round 80/300,
41.2 rounds/s, 5 s left, test_accuracy=0.91``. Notebooks (an IPython kernel) keep tqdm's widget.

The first line says what the first stretch cost and, apart, what the evaluation before it cost (the numbers
``summary.json`` records as ``first_round_seconds`` and in ``evaluation_seconds``): ``fc: round 1/50 (compiled and
ran in 4.6 s; the evaluation of round 0 took 122.9 s)``; the rate after it counts the evaluations between
stretches (they are part of the time left).
"""

from __future__ import annotations

import sys
import time

__all__ = ["RoundProgress"]

PLAIN_EVERY_S = 2.0


def _live_display(stream) -> bool:
    """True where a redrawn bar is seen as one line: a terminal or a notebook's kernel."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None and "IPKernelApp" in shell.config:
            return True
    except Exception:  # no IPython, or a shell without config
        pass
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class RoundProgress:
    """``update(count)`` after each chunk of ``count`` rounds; ``close()`` at the end (or use ``with``).
    ``initial``: rounds already done (a resumed run). ``enabled=False``: does nothing. ``plain``: plain lines
    on ``stream`` (default stderr) instead of a bar; None (default) chooses them where ``stream`` is no
    terminal and no notebook runs."""

    def __init__(self, total: int, desc: str, *, initial: int = 0, enabled: bool = True, plain=None, stream=None):
        self.total, self.desc, self.n, self.enabled = total, desc, initial, enabled
        self.compiled, self.postfix, self.postfix_label = False, None, None
        self.evaluations: list = []  # (round, seconds) of the evaluations before the first stretch ended
        self.stream = sys.stderr if stream is None else stream
        self.plain = enabled and (not _live_display(self.stream) if plain is None else plain)
        self.start, self.start_n, self.last_line, self.shown = time.perf_counter(), initial, None, initial
        self.bar = self._bar(f"{desc} (compiling)") if enabled and not self.plain else None
        if self.plain:  # a log shows what the first, silent, stretch is doing
            print(f"{desc}: round {initial}/{total} (compiling)", file=self.stream, flush=True)

    def _bar(self, desc):
        from tqdm.auto import tqdm

        bar = tqdm(
            total=self.total,
            initial=self.n,
            desc=desc,
            leave=False,
            dynamic_ncols=True,
            miniters=1,
            smoothing=0,
            unit="round",
        )
        if self.postfix:
            bar.set_postfix_str(self._postfix_text())
        return bar

    def set_postfix(self, values: dict, label=None) -> None:
        """Metrics shown after the bar (kept across the restart), after ``label`` (e.g. "round 10", the round the
        metrics are of, which the bar's count has passed) when given."""
        self.postfix, self.postfix_label = values, label
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix_text())

    def _postfix_text(self) -> str:
        values: dict = self.postfix or {}
        text = ", ".join(f"{k}={v}" for k, v in values.items())
        return f"{self.postfix_label}: {text}" if self.postfix_label else text

    def evaluated(self, t: int, seconds: float) -> None:
        """The evaluation of round ``t`` took ``seconds`` (said on the first line with the first stretch's)."""
        if not self.compiled:
            self.evaluations.append((t, seconds))

    def _line(self, seconds=None) -> None:
        now = time.perf_counter()
        if self.n < self.total and self.last_line is not None and now - self.last_line < PLAIN_EVERY_S:
            return
        self.last_line, self.shown = now, self.n
        text = f"{self.desc}: round {self.n}/{self.total}"
        if not self.compiled:
            ran = now - self.start - sum(s for _, s in self.evaluations) if seconds is None else seconds
            text += f" (compiled and ran in {ran:.1f} s"
            text += "".join(f"; the evaluation of round {t} took {s:.1f} s" for t, s in self.evaluations) + ")"
        elif self.n > self.start_n and now > self.start:
            rate = (self.n - self.start_n) / (now - self.start)
            text += f", {rate:.3g} rounds/s, {(self.total - self.n) / rate:.0f} s left"
        if self.postfix:
            text += ", " + self._postfix_text()
        print(text, file=self.stream, flush=True)

    def update(self, count: int, seconds=None) -> None:
        """``count`` more rounds done, in ``seconds`` (default: the time since the last update)."""
        self.n += count
        if self.plain:
            self._line(seconds)
            if not self.compiled:
                self.compiled, self.start, self.start_n = True, time.perf_counter(), self.n
            return
        if self.bar is None:
            return
        if not self.compiled:  # the chunk that compiled: restart the clock from here
            self.compiled = True
            self.bar.close()
            self.bar = self._bar(self.desc)
        else:
            self.bar.update(count)

    def close(self) -> None:
        if self.plain and self.n != self.shown:  # a run that stopped early: its last rounds' line
            self.last_line = None
            self._line()
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
