"""A pytest plugin (loaded by conftest.py) that says where each test's time goes: ``--timing-log FILE`` appends
one JSON line per test to FILE, from every xdist worker:

    {"test": node id, "seconds": setup + call + teardown, "trace": s, "lower": s, "compile": s,
     "programs": compiled programs, "cache_hits": of them, read from the persistent cache}

``trace`` is JAX's tracing of Python functions to jaxprs, ``lower`` the jaxpr to StableHLO, ``compile`` XLA's
backend compilation (or, on a hit, the read of the compiled program from the persistent cache), all summed from
``jax.monitoring``'s duration events in the test's own process; a subprocess's JAX time is not seen (it counts
in ``seconds`` only). ``python tests/slowest.py FILE`` prints the slowest tests and the totals.
"""

import collections
import json
import os
import time

import pytest

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}


class _Tally:
    """Per-test sums of the JAX duration events seen in this process."""

    def __init__(self):
        self.now = collections.Counter()

    def on_duration(self, event, seconds, **_):
        kind = EVENTS.get(event)
        if kind is not None:
            self.now[kind] += seconds
            if kind == "compile":
                self.now["programs"] += 1

    def on_event(self, event, **_):
        if event == "/jax/compilation_cache/cache_hits":
            self.now["cache_hits"] += 1

    def take(self) -> dict:
        taken, self.now = dict(self.now), collections.Counter()
        return taken


def pytest_addoption(parser):
    parser.addoption("--timing-log", default=None, metavar="FILE",
                     help="append one JSON line per test to FILE: its seconds and the JAX tracing, lowering and "
                          "compiling in them (python tests/slowest.py FILE summarises)")


def pytest_configure(config):
    path = config.getoption("timing_log")
    if path:
        config.pluginmanager.register(_TimingLog(os.path.abspath(path)), "fedjax_clust_timing_log")


class _TimingLog:
    def __init__(self, path):
        import jax.monitoring

        self.path = path
        self.tally = _Tally()
        jax.monitoring.register_event_duration_secs_listener(self.tally.on_duration)
        jax.monitoring.register_event_listener(self.tally.on_event)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.tally.take()  # what ran between tests (collection, a session fixture's teardown) is not this test's
        start = time.perf_counter()
        yield
        line = {"test": item.nodeid, "seconds": round(time.perf_counter() - start, 3)}
        line.update({k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.tally.take().items()})
        with open(self.path, "a") as sink:  # one short line per write: workers' lines do not interleave
            sink.write(json.dumps(line) + "\n")
