"""The ``fedjax-clust`` command line (a tool: the library never imports it)."""

__all__ = ["main"]


def main(argv=None) -> int:
    """Run the command line (:func:`fedjax_clust.cli.commands.main`); imported when called, so that
    ``python -m fedjax_clust.cli.options`` runs without the parser loaded first, and ``--help`` alone answers
    from the stored texts without starting JAX (:mod:`fedjax_clust.cli.help_texts`)."""
    import sys

    from fedjax_clust.cli.help_texts import stored
    text = stored(sys.argv[1:] if argv is None else argv)
    if text is not None:
        print(text, end="")
        return 0
    from fedjax_clust.cli.commands import main as run
    return run(argv)
