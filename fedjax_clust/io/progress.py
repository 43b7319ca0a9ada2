"""A progress bar over rounds whose rate and time left leave compilation out.

The first call of a jitted round compiles it: timing it with the rounds after it made tqdm show a rate frozen at
that first call (``1/100 [00:06<11:19]`` for a run that then finishes in seconds). :class:`RoundProgress` shows
the first chunk of rounds as ``(compiling)``, then restarts the clock: the rate is the mean over the rounds run
since, (n - n_0) / (t - t_0), and the bar is redrawn on every update (at most 10 times a second).
"""

from __future__ import annotations

__all__ = ["RoundProgress"]


class RoundProgress:
    """``update(count)`` after each chunk of ``count`` rounds; ``close()`` at the end (or use ``with``).
    ``initial``: rounds already done (a resumed run). ``enabled=False``: does nothing."""

    def __init__(self, total: int, desc: str, *, initial: int = 0, enabled: bool = True):
        self.total, self.desc, self.n, self.enabled = total, desc, initial, enabled
        self.compiled, self.postfix = False, None
        self.bar = self._bar(f"{desc} (compiling)") if enabled else None

    def _bar(self, desc):
        from tqdm.auto import tqdm
        bar = tqdm(total=self.total, initial=self.n, desc=desc, leave=False, dynamic_ncols=True, miniters=1,
                   smoothing=0, unit="round")
        if self.postfix:
            bar.set_postfix(self.postfix)
        return bar

    def set_postfix(self, values: dict) -> None:
        """Metrics shown after the bar (kept across the restart)."""
        self.postfix = values
        if self.bar is not None:
            self.bar.set_postfix(values)

    def update(self, count: int) -> None:
        self.n += count
        if self.bar is None:
            return
        if not self.compiled:  # the chunk that compiled: restart the clock from here
            self.compiled = True
            self.bar.close()
            self.bar = self._bar(self.desc)
        else:
            self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
