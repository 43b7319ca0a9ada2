"""One module per command of the command line; importing this package registers them in :data:`ORDER`, the order
``--help`` lists them (:data:`fedjax_clust.cli.command.COMMANDS`)."""

import importlib

ORDER = ("run", "compare", "bench", "sweep", "study", "profile", "project", "network")
for _name in ORDER:
    importlib.import_module(f"{__name__}.{_name}")  # each module registers its command
del _name
