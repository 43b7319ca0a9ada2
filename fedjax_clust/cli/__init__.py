"""The ``fedjax-clust`` command line (a tool: the library never imports it)."""

__all__ = ["main", "interrupted"]


def main(argv=None) -> int:
    """Run the command line (:func:`fedjax_clust.cli.commands.main`); imported when called, so that
    ``python -m fedjax_clust.cli.options`` runs without the parser loaded first, and ``--help`` alone answers
    from the stored texts without starting JAX (:mod:`fedjax_clust.cli.help_texts`)."""
    import sys

    from fedjax_clust.core.registry import PluginError

    try:  # Ctrl-C while the commands load (JAX, Flax: seconds) ends as it does during a command
        from fedjax_clust.cli.help_texts import stored

        text = stored(sys.argv[1:] if argv is None else argv)
        if text is not None:
            print(text, end="")
            return 0
        from fedjax_clust.cli.commands import main as run  # the parser lists every plugin's options
    except KeyboardInterrupt as error:
        return interrupted(error)
    except PluginError as error:  # an installed plugin that does not load: one line, as any bad input
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    return run(argv)


def interrupted(error: KeyboardInterrupt) -> int:
    """The one way every command ends on Ctrl-C: one line on stderr (what was saved, how to resume, when the
    interrupted code says), exit status 130."""
    import sys

    one_line = " ".join(str(error).split())
    if one_line.startswith("interrupted"):  # the message says it already (a run's: "interrupted after round ...")
        print(one_line, file=sys.stderr)
    else:
        print(f"interrupted: {one_line}" if one_line else "interrupted", file=sys.stderr)
    return 130
