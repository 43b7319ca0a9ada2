"""MkDocs hooks: the committed result files' figures join the site, so the paper pages show the figures the
runs drew (``experiments/results/<run>/<figure>.png`` is served as ``results/<run>/<figure>.png``)."""

from __future__ import annotations

import pathlib

from mkdocs.structure.files import File

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "experiments"


def on_files(files, config):
    for path in sorted((RESULTS / "results").rglob("*.png")):
        files.append(
            File(str(path.relative_to(RESULTS)), str(RESULTS), config["site_dir"], config["use_directory_urls"])
        )
    return files
