"""Deprecated aliases of moved names (fedjax_clust.core.moved): the old import path still gives the object, with a
DeprecationWarning naming its new home, for one version (issue 67)."""

import importlib

import pytest

from fedjax_clust.core.moved import moved_names

# old module -> {old name: its new home}, as docs/changes.md lists them
MOVED = {
    "fedjax_clust.cli.commands": {
        "split_list": "fedjax_clust.cli.arguments:split_list",
        "_algo_options": "fedjax_clust.cli.resolve:algo_options",
        "DEPENDENT": "fedjax_clust.cli.resolve:DEPENDENT",
    },
}


@pytest.mark.parametrize("module, old, new", [(m, o, n) for m, names in MOVED.items() for o, n in names.items()])
def test_an_old_path_gives_the_moved_object_and_names_its_new_home(module, old, new):
    home, _, name = new.partition(":")
    with pytest.warns(
        DeprecationWarning, match=rf"{module}\.{old} is deprecated since fedjax-clust .* moved to {home}\.{name}"
    ):
        got = getattr(importlib.import_module(module), old)
    assert got is getattr(importlib.import_module(home), name)


def test_an_unknown_name_is_still_an_attribute_error():
    getattr_ = moved_names("some.module", {"old": "fedjax_clust.cli.arguments:split_list"}, since="0.3.0")
    with pytest.raises(AttributeError, match="module 'some.module' has no attribute 'other'"):
        getattr_("other")
    with pytest.raises(AttributeError):
        importlib.import_module("fedjax_clust.cli.commands").no_such_name  # noqa: B018 - the access raises
