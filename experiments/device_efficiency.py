"""Fit the committed accelerator reports' rounds: the "measured" efficiency of every device projection.

    python experiments/device_efficiency.py --out experiments/results/device-efficiency \
        --package-file fedjax_clust/cost/measured_efficiency.json

See :mod:`fedjax_clust.bench.device_efficiency`.
"""

import glob
import sys

from fedjax_clust.bench.device_efficiency import fit_reports
from fedjax_clust.cli.config_file import OptionParser, experiment_args


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reports",
        default="experiments/results/accelerator/*/*/report.json",
        help="glob of the accelerator reports to fit (default: every committed one)",
    )
    parser.add_argument("--out", default="results/device-efficiency", help="output folder")
    parser.add_argument("--package-file", default=None, help="also write measured_efficiency.json here ('': not)")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier fits in --out")
    args = experiment_args(parser, argv, "device_efficiency.py")
    try:
        fit_reports(
            sorted(glob.glob(args.reports)), args.out, package_file=args.package_file or None, overwrite=args.overwrite
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
