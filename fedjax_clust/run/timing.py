"""What a run's seconds went to, measured apart so that its record says what the user waited for.

A run (or a sweep's program) spends its wall time in four places that overlap as follows::

    wall_seconds        = setup_seconds + round_seconds + evaluation_seconds    (from the driver's start to
                                                                                 the end of the last evaluation)
    round_seconds       = the stretches of rounds, the first one's compilation included
    evaluation_seconds  = every evaluation, its compilation included (a population of 10^5 clients can
                          spend minutes here while its rounds take seconds)
    compile_seconds     = JAX's tracing, lowering and XLA compiling (or reading a compiled program from the
                          persistent cache) anywhere in the run: part of the three above, not added to them

:class:`CompileClock` measures the last from ``jax.monitoring``'s duration events, in the thread that opened it,
while it is open: it adds a listener on entry and removes it on exit, so nothing of the process's state outlives
the run.
"""

from __future__ import annotations

import threading

import jax.monitoring

__all__ = ["COMPILE_EVENTS", "CompileClock"]

# JAX's duration events of turning a Python function into an executable: trace to a jaxpr, lower it to
# StableHLO, compile it with XLA (or read it from the persistent compilation cache)
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class CompileClock:
    """``with CompileClock() as clock: ...`` then ``clock.seconds``: the seconds JAX spent compiling (tracing,
    lowering, XLA; :data:`COMPILE_EVENTS`) in this thread inside the block, and ``clock.programs`` the programs
    handed to XLA (compiled, or read from the persistent cache). Readable while the block runs."""

    def __init__(self):
        self.seconds, self.programs = 0.0, 0
        self._thread = None

    def _on_duration(self, event: str, duration_secs: float, **_: str | int) -> None:
        if event in COMPILE_EVENTS and threading.get_ident() == self._thread:
            self.seconds += duration_secs
            if event == COMPILE_EVENTS[-1]:
                self.programs += 1

    def __enter__(self) -> "CompileClock":
        self._thread = threading.get_ident()
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        return self

    def __exit__(self, *exc) -> None:
        jax.monitoring.unregister_event_duration_listener(self._on_duration)
