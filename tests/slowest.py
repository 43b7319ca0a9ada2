"""Where the suite's time goes, from a ``--timing-log`` file (tests/jax_timing.py):

    python -m pytest -q --timing-log timing.jsonl        # the suite, logging each test's seconds
    python tests/slowest.py timing.jsonl                 # the 30 slowest tests, the slowest files, the totals
    python tests/slowest.py timing.jsonl --top 50 --files 20

Each test's seconds are split into JAX's tracing, lowering and XLA compiling in the test's own process (the
rest is running, Python and subprocesses); ``programs`` counts the compiled programs and ``hits`` those read
from the persistent compilation cache.
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
    return (f"{row['seconds']:8.1f} {parts} {jax_seconds / max(row['seconds'], 1e-9):5.0%} "
            f"{row.get('programs', 0):5d} {row.get('cache_hits', 0):5d}  {name[:width]}")


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="a --timing-log file")
    parser.add_argument("--top", type=int, default=30, help="slowest tests to list (default 30)")
    parser.add_argument("--files", type=int, default=15, help="slowest test files to list (default 15)")
    args = parser.parse_args(argv)
    rows = read(args.log)
    if not rows:
        print(f"error: {args.log} has no test lines", file=sys.stderr)
        return 2
    print(report(rows, args.top, args.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
