"""The package version, recorded in every run's configuration (a resume refuses another version's run)."""

__version__ = "0.3.0"
