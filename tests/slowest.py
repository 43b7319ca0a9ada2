"""Where the suite's time goes, from a ``--timing-log`` file (tests/jax_timing.py):

    python -m pytest -q --timing-log timing.jsonl        # the suite, logging each test's seconds
    python tests/slowest.py timing.jsonl                 # the 30 slowest tests, the slowest files, the totals
    python tests/slowest.py timing.jsonl --top 50 --files 20

Each test's seconds are split into JAX's tracing, lowering and XLA compiling in the test's own process (the
rest is running, Python and subprocesses); ``programs`` counts the compiled programs and ``hits`` those read
from the persistent compilation cache.

    python -m pytest -q --program-log programs.jsonl     # one line per program XLA compiles
    python tests/slowest.py --programs programs.jsonl    # which programs, and what sharing them would save

``--programs`` lists the programs by name (compiles, cache reads, distinct programs, seconds) and the seconds
spent compiling a program the session had already compiled with other constants in it (what passing those
numbers as arguments would save) or at other shapes too (what running every test at one task size would save).
"""

import argparse
import collections
import json
import pathlib
import sys

PARTS = ("trace", "lower", "compile")


def read(path) -> list:
    """The log's lines; a test logged twice (a rerun into the same file) keeps its last line."""
    rows = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["test"]] = row
    return list(rows.values())


def _line(name, row, width) -> str:
    jax_seconds = sum(row.get(p, 0.0) for p in PARTS)
    parts = " ".join(f"{row.get(p, 0.0):7.1f}" for p in PARTS)
    return (
        f"{row['seconds']:8.1f} {parts} {jax_seconds / max(row['seconds'], 1e-9):5.0%} "
        f"{row.get('programs', 0):5d} {row.get('cache_hits', 0):5d}  {name[:width]}"
    )


def report(rows: list, top: int = 30, files: int = 15) -> str:
    header = f"{'seconds':>8} {'trace':>7} {'lower':>7} {'compile':>7} {'jax':>5} {'progs':>5} {'hits':>5}  "
    out = [f"the {min(top, len(rows))} slowest tests", header + "test"]
    for row in sorted(rows, key=lambda r: -r["seconds"])[:top]:
        out.append(_line(row["test"], row, 100))
    by_file = collections.defaultdict(lambda: collections.Counter())
    for row in rows:
        tally = by_file[row["test"].split("::")[0]]
        tally.update({k: v for k, v in row.items() if k != "test"})
        tally["tests"] += 1
    out += ["", f"the {min(files, len(by_file))} slowest files", header + "file (tests)"]
    for name, tally in sorted(by_file.items(), key=lambda kv: -kv[1]["seconds"])[:files]:
        out.append(_line(f"{name} ({tally['tests']})", tally, 100))
    total = collections.Counter()
    for row in rows:
        total.update({k: v for k, v in row.items() if k != "test"})
    out += ["", _line(f"all {len(rows)} tests (summed over the workers)", total, 100)]
    return "\n".join(out)


def read_programs(path) -> list:
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line.strip()]


def repeated_seconds(programs: list, key: str) -> tuple:
    """(programs, seconds) compiled (not read from the cache) after one with the same ``key`` fingerprint."""
    seen, count, seconds = set(), 0, 0.0
    for program in programs:
        if program[key] in seen and not program["hit"]:
            count, seconds = count + 1, seconds + program["seconds"]
        seen.add(program[key])
    return count, seconds


def programs_report(programs: list, top: int = 30) -> str:
    by_name = collections.defaultdict(lambda: {"compiles": 0, "hits": 0, "seconds": 0.0, "distinct": set()})
    for program in programs:
        entry = by_name[program["name"]]
        entry["hits" if program["hit"] else "compiles"] += 1
        entry["seconds"] += program["seconds"]
        entry["distinct"].add(program["exact"])
    out = [
        f"the {min(top, len(by_name))} costliest program names",
        f"{'seconds':>8} {'compiles':>8} {'hits':>5} {'distinct':>8}  name",
    ]
    for name, e in sorted(by_name.items(), key=lambda kv: -kv[1]["seconds"])[:top]:
        out.append(f"{e['seconds']:8.1f} {e['compiles']:8d} {e['hits']:5d} {len(e['distinct']):8d}  {name}")
    total = sum(p["seconds"] for p in programs)
    compiled = [p for p in programs if not p["hit"]]
    out += [
        "",
        f"{len(programs)} programs handed to XLA in {total:.1f} s (summed over the workers): "
        f"{len(compiled)} compiled, {len(programs) - len(compiled)} read from the persistent cache",
    ]
    for key, what in (
        ("numbers", "the same but for its constants' values"),
        ("structure", "the same but for its constants and shapes"),
    ):
        count, seconds = repeated_seconds(programs, key)
        out.append(f"compiled after one {what}: {count} programs, {seconds:.1f} s ({seconds / max(total, 1e-9):.0%})")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="a --timing-log file (a --program-log file with --programs)")
    parser.add_argument("--programs", action="store_true", help="LOG is a --program-log file: summarise programs")
    parser.add_argument("--top", type=int, default=30, help="slowest tests to list (default 30)")
    parser.add_argument("--files", type=int, default=15, help="slowest test files to list (default 15)")
    args = parser.parse_args(argv)
    if args.programs:
        programs = read_programs(args.log)
        if not programs:
            print(f"error: {args.log} has no program lines", file=sys.stderr)
            return 2
        print(programs_report(programs, args.top))
        return 0
    rows = read(args.log)
    if not rows:
        print(f"error: {args.log} has no test lines", file=sys.stderr)
        return 2
    print(report(rows, args.top, args.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
