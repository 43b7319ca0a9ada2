"""Network projections: per-client traffic, links, a round's wall time, traces, FedScale's pickles, time to target."""

import csv
import json
import pickle

import numpy as np
import pytest

from fedjax_clust.algorithms import algorithm_spec
from fedjax_clust.algorithms.registry import Traffic
from fedjax_clust.bench.network_projection import TimeToTarget, network_projection, rounds_to_target
from fedjax_clust.cli.commands import main
from fedjax_clust.cost.fedscale import WARNING, availability_from_behaviour, convert
from fedjax_clust.cost.network import NETWORKS, Links, client_seconds, read_links, round_times, write_links


def _links(n, up=1e6, down=4e6, latency=0.05, flops=1e9):
    return Links(np.full(n, up), np.full(n, down), np.full(n, latency), np.full(n, flops))


def test_each_algorithm_s_per_client_traffic_and_its_total():
    fc = algorithm_spec("federated-clustering").traffic(100, 10, 4, 4)
    assert fc == Traffic(4 * 10 * 25, 4 * 10 * 25, 25, 25, passes=25)  # its group's 25 models down, 25 gradients up
    assert algorithm_spec("federated-clustering").comm_cost(100, 10, 4, 4) == (2 * 4 * 10 * 100 * 25, 2 * 100 * 25)
    ifca = algorithm_spec("ifca-1").traffic(100, 10, 4, 1)
    assert (ifca.down_bytes, ifca.up_bytes, ifca.passes) == (4 * 10 * 4, 4 * 10, 5)
    assert algorithm_spec("global").traffic(100, 10, 4, 1) == Traffic(40, 40, 1, 1)
    assert algorithm_spec("local").comm_cost(100, 10) == (0, 0)


def test_a_client_s_time_is_its_round_trip_transfers_and_compute():
    links = Links(
        np.array([1e6, 2e6]), np.array([4e6, 8e6]), np.array([0.05, 0.01]), np.array([1e9, 0.0]), np.array([0.0, 0.002])
    )
    traffic = Traffic(down_bytes=8e6, up_bytes=2e6, down_messages=1, up_messages=1, passes=3)
    t = client_seconds(traffic, links, np.array([0, 1, 2]), examples=32, example_flops=1e6)
    first = 2 * 0.05 + 8e6 / 4e6 + 3 * 32 * 1e6 / 1e9 + 2e6 / 1e6
    second = 2 * 0.01 + 8e6 / 8e6 + 3 * 32 * 0.002 + 2e6 / 2e6  # a measured seconds-per-example wins
    assert t == pytest.approx([first, second, first], rel=1e-12)  # client 2 reuses the trace's row 0
    alone = client_seconds(Traffic(passes=0), links, np.array([0]), examples=32, example_flops=1e6)
    assert alone.tolist() == [0.0]  # nothing sent, no round trip waited for (Local)


def test_a_synchronous_round_waits_for_its_slowest_a_deadline_drops_it_a_server_link_can_bound_it():
    links = _links(10)
    links = Links(links.up, links.down, links.latency.copy(), links.flops)
    links.latency[3] = 10.0  # one straggler
    traffic = Traffic(1e6, 1e6, 1, 1)
    base = 2 * 0.05 + 1e6 / 4e6 + 1e6 / 1e6
    sync = round_times(traffic, links, num_clients=10, participants=10, server_seconds=0.5)
    assert sync.mean == pytest.approx(base - 0.1 + 20.0 + 0.5) and sync.dropped == 0
    cut = round_times(traffic, links, num_clients=10, participants=10, server_seconds=0.5, deadline=5.0)
    assert cut.mean == pytest.approx(5.5) and cut.dropped == pytest.approx(0.1)
    narrow = round_times(traffic, _links(10), num_clients=10, participants=10, server_seconds=0.0, server_bandwidth=1e6)
    assert narrow.mean == pytest.approx(10.0) and narrow.server_link == 1.0  # 10 MB through 1 MB/s
    sampled = round_times(traffic, links, num_clients=10, participants=2, server_seconds=0.0, rounds=400, seed=1)
    # the straggler is among the two in a fifth of the rounds: the mean is between, the p90 at the straggler
    assert base < sampled.mean < base - 0.1 + 20 and sampled.p90 == pytest.approx(base - 0.1 + 20.0)
    with pytest.raises(ValueError, match="participants"):
        round_times(traffic, links, num_clients=10, participants=11, server_seconds=0.0)


def test_registered_networks_draw_around_their_medians_and_traces_round_trip(tmp_path):
    mobile = NETWORKS["mobile"].draw(20_000, seed=0)
    assert np.median(mobile.up) == pytest.approx(NETWORKS["mobile"].up, rel=0.05)
    assert np.ptp(NETWORKS["datacenter"].draw(10).latency) == 0  # sigma 0: every client alike
    links = _links(3)
    write_links(links, str(tmp_path / "t.csv"))
    back = read_links(str(tmp_path / "t.csv"))
    assert np.array_equal(back.up, links.up) and np.array_equal(back.flops, links.flops)
    (tmp_path / "t.json").write_text(
        json.dumps({"clients": [{"up_bytes_per_s": 1e5, "down_bytes_per_s": 2e5, "latency_s": 0.1}]})
    )
    assert read_links(str(tmp_path / "t.json")).down[0] == 2e5
    (tmp_path / "bad.csv").write_text("up_bytes_per_s,latency_s\n1,2\n")
    with pytest.raises(ValueError, match="down_bytes_per_s"):
        read_links(str(tmp_path / "bad.csv"))
    (tmp_path / "neg.csv").write_text("up_bytes_per_s,down_bytes_per_s,latency_s\n-1,2,0\n")
    with pytest.raises(ValueError, match="positive"):
        read_links(str(tmp_path / "neg.csv"))
    with pytest.raises(ValueError, match="no network trace"):
        read_links(str(tmp_path / "missing.csv"))


def test_fedscale_pickles_convert_to_a_trace_and_an_availability(tmp_path, capsys):
    capacity = {7: {"computation": 40.0, "communication": 8000.0}, 3: {"computation": 10.0, "communication": 800.0}}
    behaviour = {
        3: {"active": [0, 300], "inactive": [100, 400], "finish_time": 600, "duration": 600},
        7: {"active": [50], "inactive": [550], "finish_time": 600, "duration": 600},
    }
    for name, data in (("cap.pkl", capacity), ("beh.pkl", behaviour)):
        with open(tmp_path / name, "wb") as f:
            pickle.dump(data, f)
    written = convert(
        str(tmp_path / "cap.pkl"),
        str(tmp_path / "out"),
        behaviour_path=str(tmp_path / "beh.pkl"),
        rounds=8,
        round_seconds=100,
        log=print,
    )
    assert WARNING in capsys.readouterr().out  # says it unpickles, every time
    links = read_links(written[0])
    assert links.up.tolist() == [800 * 125, 8000 * 125]  # client ids in order: 3, then 7
    assert links.seconds_per_example == pytest.approx([0.03, 0.12])
    avail = np.load(written[1])
    # times 0, 100, ..., 700 (mod 600): client 3 active in [0, 100) and [300, 400); client 7 in [50, 550)
    assert avail[:, 0].tolist() == [True, False, False, True, False, False, True, False]
    assert avail[:, 1].tolist() == [False, True, True, True, True, True, False, True]
    assert availability_from_behaviour(behaviour, 3, 1, 100).shape == (1, 3)  # more clients reuse the trace's
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a readable pickle"):
        convert(str(tmp_path / "junk.pkl"), str(tmp_path / "o2"), log=lambda *_: None)


def _run(folder, algorithm, values, n=300):
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"config": {"algorithm": algorithm, "num_clients": n}}))
    (folder / "metrics.jsonl").write_text(
        "".join(json.dumps({"round": 10 * i, "mean_sq_dist_to_optimum": v}) + "\n" for i, v in enumerate(values))
    )


def _profile():
    rows = []
    for name in ("federated-clustering", "global"):
        for n in (16, 32, 64):
            rows.append(
                dict(
                    algorithm=name,
                    clients=n,
                    participants=n,
                    seconds_per_round=1e-3 * n,
                    flops=1e3 * n,
                    bytes=1e3 * n,
                    kernels=10.0,
                    peak_bytes=1e4 * n,
                    open_loops=0,
                    branch_share=0.0,
                    params=100,
                    clusters=4,
                    subgroups=1,
                )
            )
    return dict(rows=rows, example_gradient_flops=1e4, calibration=None)


def test_time_to_target_is_the_run_s_rounds_times_the_projected_round(tmp_path):
    _run(tmp_path / "runs" / "fc", "federated-clustering", [100.0, 5.0, 0.5, 0.1])
    _run(tmp_path / "runs" / "global", "global", [100.0, 90.0, 80.0])
    reached = rounds_to_target(str(tmp_path / "runs"), "mean_sq_dist_to_optimum", 1.0)
    assert reached == {"federated-clustering": (20, 300), "global": (None, 300)}
    to_target = TimeToTarget(runs=str(tmp_path / "runs"), target=1.0)
    out = network_projection(_profile(), "datacenter", to_target=to_target, log=lambda *_: None)
    fc = [r for r in out["rows"] if r["algorithm"] == "federated-clustering"]
    spec = NETWORKS["datacenter"]
    for r in fc:  # every client alike: the round is one client's time plus the server's measured program
        n = r["clients"]
        client = 2 * spec.latency + 2 * 4 * 100 * n / spec.up + n * 32 * 1e4 / spec.flops
        assert r["round_seconds_high"] == pytest.approx(client + 1e-3 * n, rel=1e-9)
        assert r["time_to_target_high"] == pytest.approx(20 * r["round_seconds_high"])
    assert all(r["time_to_target_high"] is None for r in out["rows"] if r["algorithm"] == "global")
    with pytest.raises(ValueError, match="together"):
        network_projection(_profile(), "mobile", to_target=TimeToTarget(runs=str(tmp_path / "runs"), target=None))
    old = _profile()
    del old["example_gradient_flops"]  # a profile written before the network model
    with pytest.raises(ValueError, match="predates"):
        network_projection(old, "mobile")


def test_the_network_command_writes_its_files_and_refuses_bad_input(tmp_path):
    folder = tmp_path / "profile"
    folder.mkdir()
    (folder / "profile.json").write_text(json.dumps(_profile()))
    _run(tmp_path / "runs" / "fc", "federated-clustering", [100.0, 0.5])
    assert (
        main(
            [
                "network",
                str(folder),
                "--network",
                "mobile",
                "--runs",
                str(tmp_path / "runs"),
                "--target",
                "1",
                "--deadline",
                "30",
            ]
        )
        == 0
    )
    with open(folder / "network.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["algorithm"] for r in rows} == {"federated-clustering", "global"} and len(rows) == 6
    assert (folder / "network.png").stat().st_size > 10_000
    assert main(["network", str(folder), "--network", "mobile"]) == 2  # never mixes two projections
    assert main(["network", str(folder), "--network", "nowhere.csv", "--out", str(tmp_path / "o")]) == 2
    assert main(["network", str(folder), "--network", "mobile", "--target", "1", "--out", str(tmp_path / "o")]) == 2
    assert (
        main(["network", str(folder), "--network", "mobile", "--server-device", "v100", "--out", str(tmp_path / "o")])
        == 2
    )
