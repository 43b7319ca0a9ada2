"""``make_algorithm``'s settings objects, and one map from a run's flat keywords to them.

A run's configuration is one flat record (:mod:`~fedjax_clust.algorithms.hyperparameter_record`: what run.json
writes and what sweeps vary, ``dp_noise`` and ``participation`` among its fields). In Python the settings that
are not the algorithm's own are given as objects, each checked when it is made and reusable across algorithms:

* ``privacy=``: :func:`~fedjax_clust.privacy.central_privacy` / :func:`~fedjax_clust.privacy.local_privacy`
  (:mod:`fedjax_clust.privacy.settings`), for the fourteen ``dp_*`` fields;
* ``participation=``: a :class:`Participation` (a fraction or a count of the clients, and an availability
  trace), for the ``participation`` and ``availability`` fields (a bare fraction or count stays a shorthand);
* where a run keeps its clients' rows: :class:`~fedjax_clust.run.placement.Placement`, given to ``simulate``.

``make_algorithm``'s ``dp_*`` and ``availability`` keywords are the deprecated front (fedjax-clust 0.3.0: they
still work, with a DeprecationWarning, and go in the next version). :func:`grouped_settings` turns flat
keywords (the command line's flags, a sweep's grid point, a record's fields) into the objects, which is how the
library itself calls ``make_algorithm``.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Mapping, Optional, Union

import numpy as np

from fedjax_clust.core.validation import is_traced
from fedjax_clust.privacy.settings import DP_DEFAULTS, privacy_settings

__all__ = ["DEPRECATED_KEYWORDS", "Participation", "grouped_settings", "warn_deprecated_keywords"]

# make_algorithm's keywords that a settings object stands for (the deprecated front)
DEPRECATED_KEYWORDS = (*DP_DEFAULTS, "availability")


@dataclasses.dataclass(frozen=True, eq=False)  # compared by identity: it may hold an array
class Participation:
    """The clients taking part in each round, for any task: ``make_algorithm(..., participation=Participation(
    fraction=0.1))`` (see :mod:`fedjax_clust.algorithms.participation` for how they are drawn).

    Attributes:
      fraction: S = max(1, round(f N)) clients per round, f in (0, 1], drawn uniformly without replacement.
      count: S clients per round (at most N, checked against the task when the algorithm is built); at most one
        of ``fraction`` / ``count``.
      availability: a bool [rounds, N] trace of the clients that may take part in each round, or the path of a
        ``.npy`` file holding one (read when the algorithm is built); with ``fraction`` / ``count`` that many
        are drawn among them, alone as many as the scarcest round has.
    """

    fraction: Optional[float] = None
    count: Optional[int] = None
    availability: Union[str, os.PathLike, np.ndarray, None] = None

    def __post_init__(self):
        if self.fraction is not None and self.count is not None:
            raise ValueError("Participation takes a fraction or a count of the clients, not both")
        # the wording of participation_rule's checks (the command line names its flag in them); the count's
        # upper bound and the trace's shape are checked against the task when the algorithm is built
        if self.fraction is not None:
            fraction = self.fraction
            if isinstance(fraction, bool) or not isinstance(fraction, (float, int, np.floating)):
                raise ValueError(f"participation must be a finite number in (0, 1], got {fraction!r}")
            if not 0.0 < float(fraction) <= 1.0:
                raise ValueError(f"participation must be a finite number in (0, 1], got {fraction!r}")
        if self.count is not None:
            if isinstance(self.count, bool) or not isinstance(self.count, (int, np.integer)) or self.count < 1:
                raise ValueError(f"participation must be an integer >= 1, got {self.count!r}")
        if self.fraction is None and self.count is None and self.availability is None:
            raise ValueError("Participation needs a fraction, a count or an availability trace (None: every client)")

    def keywords(self) -> dict:
        """The record's fields it stands for: ``participation`` (the fraction as a float, the count as an int)
        and ``availability``."""
        share = float(self.fraction) if self.fraction is not None else None
        count = int(self.count) if self.count is not None else None
        return {"participation": share if share is not None else count, "availability": self.availability}


def _differs(value, default) -> bool:
    if is_traced(value) or isinstance(value, np.ndarray):
        return True
    return value is not default and value != default


def given_deprecated(keywords: Mapping) -> list:
    """The deprecated keywords among ``keywords`` whose values differ from their defaults."""
    defaults = {**DP_DEFAULTS, "availability": None}
    return [k for k in DEPRECATED_KEYWORDS if k in keywords and _differs(keywords[k], defaults[k])]


def warn_deprecated_keywords(keywords: Mapping, *, stacklevel: int = 3) -> None:
    """A DeprecationWarning naming the first deprecated keyword given (module docstring) and its object."""
    given = given_deprecated(keywords)
    if not given:
        return
    instead = (
        "participation=Participation(..., availability=...)"
        if given[0] == "availability"
        else "privacy=central_privacy(...) or local_privacy(...) (fedjax_clust.privacy)"
    )
    warnings.warn(
        f"make_algorithm's {given[0]}= keyword is deprecated since fedjax-clust 0.3.0 and goes in the next "
        f"version: give {instead}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def grouped_settings(flat: Mapping) -> dict:
    """``flat`` (``make_algorithm`` keywords, a record's fields) with its ``dp_*`` keywords as ``privacy=`` and
    ``availability`` (with ``participation``) as a :class:`Participation`: the same run, given the undeprecated
    way. Values may be traced (a sweep's numbers); nothing else changes."""
    out = {k: v for k, v in flat.items() if k not in DEPRECATED_KEYWORDS}
    dp = {k: flat[k] for k in DP_DEFAULTS if k in flat}
    if dp and flat.get("privacy") is None:
        settings = privacy_settings(dp)
        if settings is not None:
            out["privacy"] = settings
    elif dp and given_deprecated(dp):
        raise ValueError(f"give the privacy settings as privacy=... or as {given_deprecated(dp)[0]}=..., not both")
    availability = flat.get("availability")
    share = flat.get("participation")
    if availability is not None and (
        share is None or (isinstance(share, (int, float, np.integer, np.floating)) and not isinstance(share, bool))
    ):
        count = int(share) if isinstance(share, (int, np.integer)) and not isinstance(share, bool) else None
        fraction = float(share) if count is None and share is not None else None
        out["participation"] = Participation(fraction=fraction, count=count, availability=availability)
    elif availability is not None:  # beside a rule or a bad value: make_algorithm says what is wrong with it
        out.update(participation=share, availability=availability)
    return out
