"""Fit the committed accelerator reports' rounds: the "measured" efficiency of every device projection.

    python experiments/device_efficiency.py --out experiments/results/device-efficiency \
        --package-file fedjax_clust/cost/measured_efficiency.json

See :mod:`fedjax_clust.bench.device_efficiency`.
"""

import sys

from fedjax_clust.bench.device_efficiency import main

if __name__ == "__main__":
    sys.exit(main())
