"""The type checker's "no new errors" rule: mypy over fedjax_clust/ (settings in pyproject.toml's [tool.mypy])
against the committed baseline .ci/mypy-baseline.txt.

JAX code does not type-check cleanly (traced arrays, pytrees, decorators that change signatures), so the errors
mypy reports today are recorded, one line each as ``path: message  [code]`` without line numbers (an edit above
an error must not make it "new"), and a run fails only when an error appears that the baseline does not hold
(counted per path and message). Errors that disappear are reported so the baseline can shrink:

    python .ci/typecheck.py            # check (exit 1 on a new error)
    python .ci/typecheck.py --update   # rewrite the baseline from today's errors (after fixing some)
"""

import collections
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "mypy-baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:]+):\d+(?::\d+)?: error: (?P<message>.*)$")


def current_errors() -> list:
    """Today's mypy errors, normalised (no line numbers), sorted."""
    done = subprocess.run([sys.executable, "-m", "mypy", "fedjax_clust"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 2: mypy itself failed (bad configuration, a syntax error)
        sys.exit(f"mypy did not run: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    errors = []
    for line in done.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            message = re.sub(r"\bline \d+\b", "line N", match["message"].strip())  # "already defined on line 141"
            errors.append(f"{match['path']}: {message}")
    return sorted(errors)


def main(argv) -> int:
    errors = current_errors()
    if "--update" in argv:
        BASELINE.write_text("".join(line + "\n" for line in errors))
        print(f"wrote {len(errors)} errors to {BASELINE.relative_to(ROOT)}")
        return 0
    baseline = collections.Counter(BASELINE.read_text().splitlines()) if BASELINE.exists() else collections.Counter()
    now = collections.Counter(errors)
    new, gone = now - baseline, baseline - now
    if gone:
        print(
            f"{sum(gone.values())} baseline errors are gone: run `python .ci/typecheck.py --update` to shrink "
            "the baseline"
        )
    if new:
        print(f"{sum(new.values())} new type errors (not in {BASELINE.relative_to(ROOT)}):")
        for line in sorted(new.elements()):
            print(f"  {line}")
        return 1
    print(f"type check: no new errors ({sum(now.values())} known, {len(baseline)} distinct in the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
