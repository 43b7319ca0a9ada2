"""The client axis split over devices gives the single-device result (8 CPU devices, in a subprocess),
with and without random subgroups, and (slow tier) with partial participation."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fedjax_clust.parallel.sharding import client_mesh, resolve_mesh

SCRIPT = textwrap.dedent("""
    import json, sys, jax, numpy as np
    jax.config.update("jax_num_cpu_devices", 8)
    from fedjax_clust import make_algorithm, synthetic_regression
    task = synthetic_regression(num_clusters=4, clients_per_cluster=6, seed=2)   # N = 24 = 3 per device
    RULES = json.loads(sys.argv[1])
    out = {}
    for name, mesh in [("sharded", "auto"), ("single", None)]:
        for rule in RULES:
            algo = make_algorithm("federated-clustering", task, learning_rate=0.01, momentum=0.9, batch_size=5,
                                  local_steps=1, mesh=mesh, **rule)
            state = algo.init(task.init_params(None), task.num_clients)
            step = jax.jit(algo.round)
            for t in range(15):
                state, metrics = step(state, task.data, jax.random.PRNGKey(t))
            out[name + str(rule)] = dict(params=np.asarray(state.params).tolist(),
                                         labels=np.asarray(metrics.get("cluster_labels", [])).tolist(),
                                         ball=float(metrics["ball_fraction"]), devices=algo.hparams["devices"],
                                         shards=len(state.params.sharding.device_set))
    print(json.dumps(out))
""")


def _sharded_and_single(rules):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # 8 CPU devices, also on a machine with a GPU
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(rules)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_sharded_round_with_partial_participation_matches_single_device():
    import numpy as np
    out = _sharded_and_single([dict(quantile=0.3, participation=16)])  # 16 of 24 clients: 2 per device
    sharded, single = out["sharded{'quantile': 0.3, 'participation': 16}"], out[
        "single{'quantile': 0.3, 'participation': 16}"]
    assert sharded["devices"] == 8 and sharded["shards"] == 8 and single["devices"] == 1
    np.testing.assert_allclose(sharded["params"], single["params"], rtol=1e-4, atol=1e-3)
    assert abs(sharded["ball"] - single["ball"]) < 1e-6


def test_sharded_round_matches_single_device():
    out = _sharded_and_single([dict(quantile=0.3), dict(radius=40.0),
                               dict(quantile=0.5, subgroups=3, track_clusters=True)])
    import numpy as np
    for rule in ["{'quantile': 0.3}", "{'radius': 40.0}",
                 "{'quantile': 0.5, 'subgroups': 3, 'track_clusters': True}"]:
        sharded, single = out["sharded" + rule], out["single" + rule]
        assert sharded["devices"] == 8 and sharded["shards"] == 8 and single["devices"] == 1
        np.testing.assert_allclose(sharded["params"], single["params"], rtol=1e-4, atol=1e-3)
        assert abs(sharded["ball"] - single["ball"]) < 1e-6
        assert sharded["labels"] == single["labels"]
    assert len(out["single{'quantile': 0.5, 'subgroups': 3, 'track_clusters': True}"]["labels"]) == 24


def test_mesh_arguments():
    assert client_mesh([object()]) is None  # one device: no mesh
    assert resolve_mesh(None) is None
    with pytest.raises(ValueError, match="mesh"):
        resolve_mesh("everywhere")
    with pytest.raises(ValueError, match="mesh"):
        resolve_mesh(42)
