"""Benchmarks and the profiler (tools: the library never imports them)."""
