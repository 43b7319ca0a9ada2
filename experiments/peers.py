"""The same FedAvg round in fedjax-clust, FedJAX and Flower, side by side on this machine.

    python experiments/peers.py --out experiments/results/peers            # builds the peers' venvs first

Each peer runs in its own virtual environment built from the package index (``--venvs``; FedJAX 0.0.17 needs an
older JAX, so it gets jax / jaxlib 0.4.30 and the Haiku and Optax of that time: :data:`PEERS` pins every
version, and each run records what it imported). The cases (``--tasks`` x ``--clients``, and cohorts
``--cohorts`` out of ``--cohort-population``) are written once as arrays (``--work``); every peer's runner
(``experiments/peers/run_<peer>.py``, written from each project's documentation with its own stack: Haiku and
FedJAX's FedAvg; NumPy clients under Flower's simulation engine; a JAX example loss and ``simulate`` here) reads
them and does FedAvg with one full-batch gradient step per client and round (FedSGD), ``--rounds`` rounds:

* the synthetic regression of Werner et al. §4.1 (d = 10, n = 9 examples a client, learning rate 0.01);
* MNIST (the package's offline 5,000-image subset, 8 images a client) with an MLP 784-32-10, learning rate 0.1.

Before any timing is trusted, every peer's model after round 1 at full participation is compared with
fedjax-clust's (``agreement``: the largest difference relative to the largest entry; cohorts are each
framework's own draws, so they are not compared). Times: ``startup`` (process start to the first round:
imports, data, building, Ray's workers), the first round (compilation included), the median of the rounds after
it, and ``end_to_end`` = startup + every round: what a user waits for. A run past ``--timeout`` seconds is
recorded as such. Writes ``results.json`` (every row, the environment) and ``results.md``.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUNNERS = ROOT / "experiments" / "peers"
PEERS = {  # name -> (runner, pinned requirements; None: this checkout's own interpreter)
    "fedjax-clust": ("run_ours.py", None),
    "fedjax": (
        "run_fedjax.py",
        ["fedjax==0.0.17", "jax[cpu]==0.4.30", "jaxlib==0.4.30", "dm-haiku==0.0.12", "optax==0.2.3", "numpy<2"],
    ),
    "flower": ("run_flower.py", ["flwr[simulation]==1.42.0"]),
}
TASKS = {"synthetic": dict(lr=0.01), "mnist": dict(lr=0.1, hidden=32, examples=8)}
AGREEMENT = 1e-4  # float32 rounding over a gradient summed in different orders, relative to the largest entry
MARK = "PEER-RESULT "


def build_case(folder: pathlib.Path, task: str, clients: int, cohort: int, rounds: int) -> pathlib.Path:
    """Write one case (see experiments/peers/peer_common.py) unless it is there."""
    import numpy as np

    if (folder / "case.json").exists():  # its name holds every setting (task, N, S, rounds)
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    if task == "synthetic":
        from fedjax_clust.tasks import synthetic_regression

        data = synthetic_regression(num_clusters=4, clients_per_cluster=clients // 4).data
        x, y = np.asarray(data["x"], np.float32), np.asarray(data["y"], np.float32)
        params = [np.zeros(x.shape[-1], np.float32)]
    else:
        from fedjax_clust.data.sources import load_source

        pool = load_source("mnist-5k")
        images = np.asarray(pool.images, np.float32).reshape(len(pool.labels), -1)
        picks = rng.integers(0, len(pool.labels), size=(clients, TASKS["mnist"]["examples"]))
        x, y = images[picks], np.asarray(pool.labels, np.int32)[picks]
        hidden = TASKS["mnist"]["hidden"]
        params = [
            (rng.standard_normal((784, hidden)) / np.sqrt(784)).astype(np.float32),
            np.zeros(hidden, np.float32),
            (rng.standard_normal((hidden, 10)) / np.sqrt(hidden)).astype(np.float32),
            np.zeros(10, np.float32),
        ]
    np.save(folder / "x.npy", x)
    np.save(folder / "y.npy", y)
    np.savez(folder / "params.npz", **{f"p{i}": p for i, p in enumerate(params)})
    case = dict(task=task, clients=clients, cohort=cohort, rounds=rounds, lr=TASKS[task]["lr"])
    (folder / "case.json").write_text(json.dumps(case))
    return folder


def python_of(peer: str, venvs: pathlib.Path, setup: bool, log=print) -> str:
    """The interpreter that runs ``peer``: this one for fedjax-clust, else its venv's (built with ``setup``)."""
    requirements = PEERS[peer][1]
    return sys.executable if requirements is None else venv_python(peer, requirements, venvs, setup, log)


def venv_python(name: str, requirements: list, venvs: pathlib.Path, setup: bool, log=print) -> str:
    """The interpreter of the virtual environment ``venvs/name``, built from the package index with
    ``pip install *requirements`` when missing and ``setup`` is set (SystemExit naming --setup otherwise)."""
    python = venvs / name / "bin" / "python"
    if not python.exists():
        if not setup:
            raise SystemExit(f"no virtual environment for {name} at {venvs / name}: pass --setup to build it")
        log(f"building {name}'s virtual environment: pip install {' '.join(requirements)}")
        subprocess.run([sys.executable, "-m", "venv", str(venvs / name)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
    return str(python)


def parse_result(stdout: str) -> dict:
    """The runner's result line (``PEER-RESULT {json}``); ValueError when it printed none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise ValueError("the runner printed no result line")


def summarise(result: dict, process_seconds: float) -> dict:
    """One row from a runner's result: its timings summarised (module docstring)."""
    rounds = result["round_seconds"]
    later = rounds[1:] or rounds
    startup = result.get("startup_seconds")
    return {
        "peer": result["peer"],
        "task": result["task"],
        "clients": result["clients"],
        "cohort": result["cohort"],
        "status": "ok",
        "startup_seconds": startup,
        "first_round_seconds": rounds[0],
        "round_seconds": statistics.median(later),
        "end_to_end_seconds": None if startup is None else startup + sum(rounds),
        "process_seconds": process_seconds,
        "rounds": len(rounds),
        "interface": result["interface"],
        "resources": result["resources"],
        "versions": result["versions"],
        **({"startup_parts": result["startup_parts"]} if "startup_parts" in result else {}),
    }


def agreement(ours: pathlib.Path, theirs: pathlib.Path) -> float:
    """max |theirs - ours| / max |ours| over the model's arrays after round 1."""
    import numpy as np

    a, b = np.load(ours / "round1.npz"), np.load(theirs / "round1.npz")
    scale = max(float(np.abs(a[k]).max()) for k in a.files) or 1.0
    return max(float(np.abs(np.asarray(b[k], np.float64) - a[k]).max()) for k in a.files) / scale


def run_case(peer, python, case: pathlib.Path, out: pathlib.Path, timeout: float) -> dict:
    tic = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(RUNNERS)}
    try:
        done = subprocess.run(
            [python, str(RUNNERS / PEERS[peer][0]), str(case), str(out)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=str(RUNNERS),
        )
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout:.0f} s", "process_seconds": time.perf_counter() - tic}
    seconds = time.perf_counter() - tic
    try:
        return summarise(parse_result(done.stdout), seconds)
    except (ValueError, KeyError) as error:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"status": f"failed ({error}): {' | '.join(tail)}", "process_seconds": seconds}


def _ints(text):
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv=None) -> int:
    from fedjax_clust.cli.config_file import OptionParser, experiment_args

    parser = OptionParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/peers")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--venvs", default=os.path.expanduser("~/.cache/fedjax-clust-peers"))
    parser.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "fedjax-clust-peers-work"))
    parser.add_argument("--setup", action="store_true", help="build missing virtual environments (downloads)")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--clients", default="100,1000,10000")
    parser.add_argument("--cohorts", default="10,100")
    parser.add_argument("--cohort-population", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--compile-cache",
        default=None,
        help="fedjax-clust's runner keeps JAX's persistent compilation cache in this folder "
        "(fedjax_clust_program.use_compile_cache); with --warm-up every case of "
        "ours runs once first, so the timed runs read their programs (default: none)",
    )
    parser.add_argument("--warm-up", action="store_true")
    args = experiment_args(parser, argv, "peers.py")
    out = pathlib.Path(args.out)
    if (out / "results.json").exists() and not args.overwrite:
        parser.error(f"{out} already holds results.json; pass --overwrite to replace it")
    peers = [p for p in args.peers.split(",") if p]
    unknown = sorted(set(peers) - set(PEERS))
    if unknown or "fedjax-clust" not in peers:
        parser.error(f"--peers: known {sorted(PEERS)}, fedjax-clust included (the reference); got {args.peers}")
    pythons = {p: python_of(p, pathlib.Path(args.venvs), args.setup) for p in peers}
    configs = [(t, n, n) for t in args.tasks.split(",") for n in _ints(args.clients)]
    configs += [(t, args.cohort_population, s) for t in args.tasks.split(",") for s in _ints(args.cohorts)]
    if args.compile_cache:
        # this script's children (the runner calls use_compile_cache with it)
        os.environ["FEDJAX_CLUST_COMPILE_CACHE"] = os.path.abspath(os.path.expanduser(args.compile_cache))
    else:  # a cache named in the user's shell would make the "no cache" runs warm
        os.environ.pop("FEDJAX_CLUST_COMPILE_CACHE", None)
    rows = []
    for task, clients, cohort in configs:
        name = f"{task}-N{clients}-S{cohort}-R{args.rounds}"
        case = build_case(pathlib.Path(args.work) / name, task, clients, cohort, args.rounds)
        if args.warm_up:  # ours once, untimed: the timed run reads its compiled programs from the cache
            run_case(
                "fedjax-clust", pythons["fedjax-clust"], case, pathlib.Path(args.work) / "warm-up" / name, args.timeout
            )
        for peer in peers:
            run_out = pathlib.Path(args.work) / "runs" / peer / name
            row = {
                "peer": peer,
                "task": task,
                "clients": clients,
                "cohort": cohort,
                **run_case(peer, pythons[peer], case, run_out, args.timeout),
            }
            ours_ok = any(
                r["peer"] == "fedjax-clust"
                and r["status"] == "ok"
                and (r["task"], r["clients"], r["cohort"]) == (task, clients, cohort)
                for r in rows
            )
            if row["status"] == "ok" and peer != "fedjax-clust" and cohort == clients and ours_ok:
                row["agreement"] = agreement(pathlib.Path(args.work) / "runs" / "fedjax-clust" / name, run_out)
            rows.append(row)
            print(
                json.dumps(
                    {
                        k: row.get(k)
                        for k in (
                            "peer",
                            "task",
                            "clients",
                            "cohort",
                            "status",
                            "round_seconds",
                            "end_to_end_seconds",
                            "agreement",
                        )
                    }
                ),
                flush=True,
            )
    environment = {
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "rounds": args.rounds,
        "agreement_tolerance": AGREEMENT,
        "timeout_seconds": args.timeout,
        "pins": {p: PEERS[p][1] for p in peers},
        "compile_cache": bool(args.compile_cache),
        "warm_up": args.warm_up,
        "date": time.strftime("%Y-%m-%d"),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"environment": environment, "rows": rows}, indent=1) + "\n")
    (out / "results.md").write_text(markdown(rows) + "\n")
    bad = [r for r in rows if r.get("agreement") is not None and r["agreement"] > AGREEMENT]
    for r in bad:
        print(f"disagreement: {r['peer']} {r['task']} N = {r['clients']}: {r['agreement']:.2e}", file=sys.stderr)
    return 1 if bad else 0


def markdown(rows) -> str:
    """The ratios to fedjax-clust, per round and end to end, one line per case and peer."""
    ours = {(r["task"], r["clients"], r["cohort"]): r for r in rows if r["peer"] == "fedjax-clust"}
    lines = [
        "| task | N | cohort | peer | seconds a round (ours) | x ours a round | end to end (ours) | "
        "x ours end to end | round-1 agreement |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r["peer"] == "fedjax-clust":
            continue
        mine = ours.get((r["task"], r["clients"], r["cohort"]))
        if r["status"] != "ok" or mine is None or mine["status"] != "ok":
            lines.append(f"| {r['task']} | {r['clients']:,} | {r['cohort']:,} | {r['peer']} | {r['status']} | | | | |")
            continue
        agree = "" if r.get("agreement") is None else f"{r['agreement']:.1e}"
        lines.append(
            f"| {r['task']} | {r['clients']:,} | {r['cohort']:,} | {r['peer']} | {r['round_seconds']:.3g} s "
            f"({mine['round_seconds']:.3g} s) | {r['round_seconds'] / mine['round_seconds']:,.0f}x | "
            f"{r['end_to_end_seconds']:.3g} s ({mine['end_to_end_seconds']:.3g} s) | "
            f"{r['end_to_end_seconds'] / mine['end_to_end_seconds']:,.1f}x | {agree} |"
        )
    parts = [r for r in rows if r["peer"] == "fedjax-clust" and r.get("startup_parts")]
    if parts:
        names = list(parts[0]["startup_parts"])
        lines += [
            "",
            "fedjax-clust's start-up: seconds, and the compiled programs counted (compile: tracing, "
            "lowering and XLA, or reading the program from the compilation cache; part of the first round "
            "and the set-up):",
            "",
            "| task | N | cohort | " + " | ".join(n.replace("_", " ") for n in names) + " |",
            "| --- | --- | --- | " + " | ".join("---" for _ in names) + " |",
        ]
        lines += [
            f"| {r['task']} | {r['clients']:,} | {r['cohort']:,} | "
            + " | ".join(f"{r['startup_parts'][n]:.3g}" for n in names)
            + " |"
            for r in parts
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
