"""``python -m fedjax_clust.cli``."""

from fedjax_clust.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
