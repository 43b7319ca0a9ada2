"""A run's privacy settings as one object, and its ``dp_*`` keywords: one map between the two.

``make_algorithm`` takes the privacy of a run either as one settings object, ``privacy=`` a
:class:`~fedjax_clust.privacy.central.CentralPrivacy` (:func:`~fedjax_clust.privacy.central.central_privacy`) or a
:class:`~fedjax_clust.privacy.local.LocalPrivacy` (:func:`~fedjax_clust.privacy.local.local_privacy`), checked when it
is made and reusable across algorithms, or as the fourteen ``dp_*`` keywords the command line's ``--dp-*`` flags
set. Both stand for the same run: the hyperparameter record (and run.json) holds the ``dp_*`` fields, which a
sweep varies (``dp_noise`` is traced), whichever way the run was given.

:data:`DP_KEYWORDS` names each settings field's keyword; :data:`DP_DEFAULTS` are the keywords' defaults, read from
the settings classes (the one place they are declared; ``dp_clip`` None: no privacy, ``dp_mode`` "central").
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Union

from fedjax_clust.privacy.central import CentralPrivacy, adaptive_clipping, central_privacy
from fedjax_clust.privacy.local import LocalPrivacy, local_privacy

__all__ = ["CENTRAL_ONLY", "DP_DEFAULTS", "DP_KEYWORDS", "PrivacySettings", "privacy_keywords", "privacy_settings"]

PrivacySettings = Union[CentralPrivacy, LocalPrivacy]

DP_KEYWORDS = {  # settings field -> make_algorithm keyword
    "clip": "dp_clip",
    "noise_multiplier": "dp_noise",
    "target_epsilon": "dp_epsilon",
    "delta": "dp_delta",
    "rounds": "dp_rounds",
    "accountant": "dp_accountant",
    "sampling": "dp_sampling",
    "slots": "dp_slots",
    "denominator": "dp_denominator",
    "count_noise_ratio": "dp_count_noise_ratio",
    "clip_quantile": "dp_clip_quantile",
    "clip_lr": "dp_clip_lr",
    "clip_count_noise": "dp_clip_count_noise",
}
# CentralPrivacy's fields that central_privacy takes as one AdaptiveClipping
_ADAPTIVE_FIELDS = ("clip_quantile", "clip_lr", "clip_count_noise")
_LOCAL_FIELDS = tuple(f.name for f in dataclasses.fields(LocalPrivacy))
CENTRAL_ONLY = tuple(DP_KEYWORDS[f.name] for f in dataclasses.fields(CentralPrivacy) if f.name not in _LOCAL_FIELDS)
DP_DEFAULTS = {
    "dp_mode": "central",
    **{DP_KEYWORDS[f.name]: None if f.name == "clip" else f.default for f in dataclasses.fields(CentralPrivacy)},
}


def privacy_keywords(settings: PrivacySettings) -> dict:
    """The ``dp_*`` keywords (every one, ``dp_mode`` included) that ``settings`` stand for; a local setting's
    central-only keywords at their defaults."""
    if not isinstance(settings, (CentralPrivacy, LocalPrivacy)):
        raise ValueError(
            "privacy must be settings from fedjax_clust.privacy.central_privacy(...) or local_privacy(...), "
            f"got {settings!r}"
        )
    out = dict(DP_DEFAULTS, dp_mode="local" if isinstance(settings, LocalPrivacy) else "central")
    out.update({DP_KEYWORDS[f.name]: getattr(settings, f.name) for f in dataclasses.fields(settings)})
    return out


def privacy_settings(keywords: Mapping) -> Optional[PrivacySettings]:
    """The checked settings the ``dp_*`` ``keywords`` give (those left out at :data:`DP_DEFAULTS`), or None
    without ``dp_clip`` (then every other one must be at its default); local privacy takes none of
    :data:`CENTRAL_ONLY`. One-line ValueErrors name the keyword."""
    unknown = sorted(set(keywords) - set(DP_DEFAULTS))
    if unknown:
        raise ValueError(f"{unknown[0]} is no privacy keyword; they are {sorted(DP_DEFAULTS)}")
    given = {**DP_DEFAULTS, **keywords}
    changed = [k for k, v in given.items() if k != "dp_clip" and v != DP_DEFAULTS[k]]
    if given["dp_clip"] is None:
        if changed:
            raise ValueError(f"{changed[0]} needs dp_clip (the clip bound that turns privacy on)")
        return None
    mode = given["dp_mode"]
    if mode not in ("central", "local"):
        raise ValueError(f"dp_mode must be 'central' or 'local', got {mode!r}")
    if mode == "local":
        central_only = [k for k in changed if k in CENTRAL_ONLY]
        if central_only:
            raise ValueError(f"{central_only[0]} applies to central privacy, not dp_mode='local'")
        return local_privacy(**{f: given[DP_KEYWORDS[f]] for f in _LOCAL_FIELDS})
    fields = {f: given[k] for f, k in DP_KEYWORDS.items()}
    quantile, lr, count_noise = (fields.pop(f) for f in _ADAPTIVE_FIELDS)
    if quantile is None:
        if lr != DP_DEFAULTS["dp_clip_lr"] or count_noise is not None:
            raise ValueError("dp_clip_lr and dp_clip_count_noise need dp_clip_quantile (adaptive clipping)")
        return central_privacy(**fields)
    return central_privacy(**fields, adaptive=adaptive_clipping(quantile, lr=lr, count_noise=count_noise))
