"""Results on disk: run folders, checkpoints and strict JSON."""
