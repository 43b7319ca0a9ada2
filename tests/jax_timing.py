"""A pytest plugin (loaded by conftest.py) that says where each test's time goes: ``--timing-log FILE`` appends
one JSON line per test to FILE, from every xdist worker:

    {"test": node id, "seconds": setup + call + teardown, "trace": s, "lower": s, "compile": s,
     "programs": compiled programs, "cache_hits": of them, read from the persistent cache}

``trace`` is JAX's tracing of Python functions to jaxprs, ``lower`` the jaxpr to StableHLO, ``compile`` XLA's
backend compilation (or, on a hit, the read of the compiled program from the persistent cache), all summed from
``jax.monitoring``'s duration events in the test's own process; a subprocess's JAX time is not seen (it counts
in ``seconds`` only). ``python tests/slowest.py FILE`` prints the slowest tests and the totals.

``--program-log FILE`` appends one line per program handed to XLA (a compile or a persistent-cache read):

    {"test": node id, "name": the program's name (jit_<function>), "seconds": s, "hit": read from the cache,
     "exact": hash of its StableHLO, "numbers": the same with every constant's value elided,
     "structure": the same with the constants' values and every array shape elided}

``python tests/slowest.py --programs FILE`` says how much compiling the suite would save if programs that
differ only in their constants (hyperparameters baked into the program) or only in their shapes (tasks of
other sizes) were one program. It reads the module through JAX's private ``jax._src.compiler`` (the one call
every compile passes through): a JAX that renames it makes the option fail with that name, not the suite.
"""

import collections
import hashlib
import json
import os
import re
import time

import pytest

EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}


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
    parser.addoption(
        "--timing-log",
        default=None,
        metavar="FILE",
        help="append one JSON line per test to FILE: its seconds and the JAX tracing, lowering and "
        "compiling in them (python tests/slowest.py FILE summarises)",
    )
    parser.addoption(
        "--program-log",
        default=None,
        metavar="FILE",
        help="append one JSON line per program XLA compiles or reads from the cache: its name, "
        "seconds and fingerprints (python tests/slowest.py --programs FILE summarises)",
    )


def pytest_configure(config):
    path = config.getoption("timing_log")
    if path:
        config.pluginmanager.register(_TimingLog(os.path.abspath(path)), "fedjax_clust_timing_log")
    path = config.getoption("program_log")
    if path:
        config.pluginmanager.register(_ProgramLog(os.path.abspath(path)), "fedjax_clust_program_log")


_CONSTANT = re.compile(r"dense(_resource)?<[^>]*>")
_SHAPE = re.compile(r"tensor<[0-9x]*")


def fingerprints(module_text: str, exact: bytes | None = None) -> dict:
    """Three short hashes of a program: ``exact``, of ``exact`` (the module's bytecode) or else of its StableHLO
    text; ``numbers``, of the text with every constant's value elided (``dense<...>``), so programs that differ
    only in numbers baked into them agree; ``structure``, the array shapes elided too (``tensor<6x10xf32>``
    reads ``tensor<f32>``), so the same program at another size agrees."""
    numbers = _CONSTANT.sub("dense<>", module_text)
    digest = lambda data: hashlib.sha1(data).hexdigest()[:16]  # noqa: E731
    return {
        "exact": digest(module_text.encode() if exact is None else exact),
        "numbers": digest(numbers.encode()),
        "structure": digest(_SHAPE.sub("tensor<", numbers).encode()),
    }


def _bytecode(operation) -> bytes:
    import io

    buffer = io.BytesIO()
    operation.write_bytecode(buffer)
    return buffer.getvalue()


class _ProgramLog:
    """Wraps ``jax._src.compiler.compile_or_get_cached`` (module docstring) to log each program; ``close``
    puts the original back."""

    def __init__(self, path):
        import jax.monitoring
        from jax._src import compiler

        self.path, self.test, self.hits = path, None, 0
        self._compiler, self._original = compiler, compiler.compile_or_get_cached
        jax.monitoring.register_event_listener(self._on_event)
        compiler.compile_or_get_cached = self._compile

    def _on_event(self, event, **_):
        if event == "/jax/compilation_cache/cache_hits":
            self.hits += 1

    def _compile(self, backend, computation, *args, **kwargs):
        hits, start = self.hits, time.perf_counter()
        executable = self._original(backend, computation, *args, **kwargs)
        seconds = time.perf_counter() - start
        operation = computation.operation
        line = {
            "test": self.test,
            "name": str(operation.attributes["sym_name"]).strip('"'),
            "seconds": round(seconds, 4),
            "hit": self.hits > hits,
            **fingerprints(operation.get_asm(large_elements_limit=16), exact=_bytecode(operation)),
        }
        with open(self.path, "a") as sink:
            sink.write(json.dumps(line) + "\n")
        return executable

    def close(self):
        import jax.monitoring

        self._compiler.compile_or_get_cached = self._original
        jax.monitoring.unregister_event_listener(self._on_event)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.test = item.nodeid
        yield
        self.test = None

    def pytest_unconfigure(self, config):
        self.close()


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
