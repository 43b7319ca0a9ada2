"""One process of the two-process CPU run of tests/test_multihost.py (not collected by pytest).

python tests/multihost_worker.py PROCESS_ID PORT OUT_DIR
"""

import os
import sys

from fedjax_clust.run.driver_options import Evaluation, Output

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"


def main(process_id: int, port: int, out_dir: str) -> None:
    from fedjax_clust.parallel import multihost

    multihost.initialize(f"localhost:{port}", num_processes=2, process_id=process_id)
    import jax
    from multihost_cases import CASES, POOLED_CASE, case_task, pooled_task

    from fedjax_clust import make_algorithm, simulate

    assert jax.process_count() == 2 and len(jax.devices()) == 2
    task = multihost.distribute_task(case_task())
    assert not jax.tree.leaves(task.data)[0].is_fully_addressable  # each process holds half of the clients
    for name, options in CASES:
        algo = make_algorithm(name, task, **options)
        simulate(
            algo,
            task,
            rounds=6,
            seed=1,
            evaluation=Evaluation(eval_every=3),
            output=Output(progress=False, out_dir=os.path.join(out_dir, name)),
        )
    pooled = multihost.distribute_task(pooled_task())
    assert {x.shape[0] for x in jax.tree.leaves(pooled.data)} == {8}  # built images, half of them here
    assert {x.addressable_data(0).shape[0] for x in jax.tree.leaves(pooled.data)} == {4}
    name, options = POOLED_CASE
    simulate(
        make_algorithm(name, pooled, **options),
        pooled,
        rounds=4,
        seed=1,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=os.path.join(out_dir, "pooled-" + name)),
    )


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
