"""The one registry type (fedjax_clust.core.registry): registration, lookup with a "did you mean", the mapping
protocol, and entry-point loading with its one failure rule; and that every registry of the package is one."""

import dataclasses
import importlib.metadata

import pytest

from fedjax_clust.core.registry import Registry, UnknownName, did_you_mean


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    value: int = 0


GROUP = "fedjax_clust_tests.registry"


def test_register_lookup_and_mapping_protocol():
    registry = Registry("widget", value_type=Spec)
    first, second = registry.register(Spec("first", 1)), registry.register(Spec("second", 2))
    assert registry.lookup("first") is first and registry["second"] is second
    assert list(registry) == ["first", "second"] and len(registry) == 2 and "first" in registry
    assert dict(registry.items()) == {"first": first, "second": second}
    assert registry.get("third") is None and "third" not in registry
    assert registry.listing() == "first, second"
    assert registry.register(first) is first  # the same value again is no conflict
    with pytest.raises(ValueError, match="widget 'first' is already registered"):
        registry.register(Spec("first", 3))
    replaced = registry.register(Spec("first", 3), replace=True)
    assert registry["first"] is replaced and list(registry) == ["first", "second"]  # keeps its place
    assert registry.unregister("second") is second and list(registry) == ["first"]
    with pytest.raises(ValueError, match="widget 'second' is not registered"):
        registry.unregister("second")


def test_bad_values_and_names_are_refused():
    registry = Registry("widget", value_type=Spec)
    with pytest.raises(ValueError, match="register_widget takes a Spec, got 3"):
        registry.register(3)
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        registry.register(Spec(" padded "))
    named = Registry("builder", name_of=None)
    with pytest.raises(ValueError, match="needs its name"):
        named.register(len)
    assert named.register(len, name="length") is len and named["length"] is len


def test_an_unknown_name_lists_the_known_ones_and_the_closest():
    registry = Registry("algorithm", value_type=Spec)
    for name in ("federated-clustering", "fedavg", "ifca"):
        registry.register(Spec(name))
    with pytest.raises(UnknownName) as raised:
        registry.lookup("federated-clusterin")
    message = str(raised.value)
    assert message.startswith("unknown algorithm 'federated-clusterin'; expected one of ['federated-clustering',")
    assert message.endswith("did you mean 'federated-clustering'?")
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, KeyError)
    assert "did you mean" not in str(registry.unknown("zzzzzz"))
    assert did_you_mean("fedav", ["fedavg", "ditto"]) == "; did you mean 'fedavg'?"


def _entry_points(monkeypatch, entries):
    real = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda **sel: list(entries) if sel.get("group") == GROUP else real(**sel)
    )


def test_entry_points_load_once_never_shadow_a_built_in_and_follow_the_failure_rule(monkeypatch, tmp_path):
    (tmp_path / "registry_plugin_demo.py").write_text(
        "import dataclasses\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Spec:\n    name: str\n    value: int = 0\n"
        "ONE = Spec('plugged', 7)\n"
        "SHADOW = Spec('built-in', 99)\n"
        "def several():\n    return [Spec('made', 1), Spec('also-made', 2)]\n"
        "NOT_A_SPEC = 5\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = [
        importlib.metadata.EntryPoint("broken", "registry_plugin_demo:NO_SUCH", GROUP),
        importlib.metadata.EntryPoint("plugged", "registry_plugin_demo:ONE", GROUP),
        importlib.metadata.EntryPoint("shadow", "registry_plugin_demo:SHADOW", GROUP),
        importlib.metadata.EntryPoint("several", "registry_plugin_demo:several", GROUP),
    ]
    _entry_points(monkeypatch, entries)
    from registry_plugin_demo import Spec

    registry = Registry("widget", value_type=Spec, group=GROUP)
    built_in = registry.register(Spec("built-in", 0))
    assert registry.registered() == ("built-in",) and registry.lookup("built-in") is built_in  # nothing loaded
    for _ in range(2):  # a broken plugin raises at every listing, never once and then silence
        with pytest.raises(ValueError, match="the widget plugin 'broken' .* failed to load"):
            registry.names()
    del entries[0]
    assert registry.names() == ("built-in", "plugged", "made", "also-made")
    assert registry["built-in"] is built_in and registry["plugged"].value == 7  # a plugin never shadows
    entries.append(importlib.metadata.EntryPoint("wrong", "registry_plugin_demo:NOT_A_SPEC", GROUP))
    assert registry.names() == ("built-in", "plugged", "made", "also-made")  # loaded once
    fresh = Registry("widget", value_type=Spec, group=GROUP)  # the plugin module's own Spec
    with pytest.raises(ValueError, match="the widget plugin 'wrong' .* gives 5, not a Spec"):
        fresh.lookup("plugged")


def test_every_registry_of_the_package_is_the_one_type():
    from fedjax_clust.algorithms import registry as algorithms
    from fedjax_clust.cli.benchmarks import BENCHMARKS
    from fedjax_clust.cli.command import COMMANDS
    from fedjax_clust.cli.subcommands.bench import SUITES
    from fedjax_clust.cost.devices import DEVICES
    from fedjax_clust.cost.network import NETWORKS
    from fedjax_clust.data.partitioners import PARTITIONERS
    from fedjax_clust.models.weight_init import WEIGHT_INITS
    from fedjax_clust.privacy.accounting import ACCOUNTANTS
    from fedjax_clust.robust import registry as robust
    from fedjax_clust.tasks import TASKS

    for registry in (
        algorithms._ALGORITHMS,
        robust.AGGREGATOR_REGISTRY,
        robust.ATTACK_REGISTRY,
        TASKS,
        DEVICES,
        NETWORKS,
        ACCOUNTANTS,
        PARTITIONERS,
        WEIGHT_INITS,
        BENCHMARKS,
        SUITES,
        COMMANDS,
    ):
        assert isinstance(registry, Registry), registry
        assert len(registry) > 0 and all(name in registry for name in registry)
    with pytest.raises(ValueError, match="did you mean 'mnist-rotation'"):
        TASKS.lookup("mnist-rotaton")
    assert list(COMMANDS) == ["run", "compare", "bench", "sweep", "study", "profile", "project", "network"]


def test_a_registry_is_one_object_and_a_nameless_plugin_value_is_named_in_the_error(monkeypatch, tmp_path):
    first, second = Registry("widget", value_type=Spec), Registry("widget", value_type=Spec)
    assert first == first and first != second and len({first, second}) == 2  # not compared by contents
    (tmp_path / "registry_nameless_demo.py").write_text("def build():\n    return 1\nNAMELESS = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _entry_points(monkeypatch, [importlib.metadata.EntryPoint("nameless", "registry_nameless_demo:NAMELESS", GROUP)])
    with pytest.raises(ValueError, match="the widget plugin 'nameless' .*: 'object' object has no attribute 'name'"):
        Registry("widget", group=GROUP).names()
    _entry_points(monkeypatch, [importlib.metadata.EntryPoint("two", "registry_nameless_demo:build", GROUP)])
    builders = Registry("builder", group=GROUP, name_of=None)
    assert builders.names() == ("two",) and builders["two"]() == 1  # a function is the value, never called


@pytest.mark.parametrize("argv", [["--model", "mlp", "--pair-loop-rounds", "0"], ["--model", "linear", "--dim", "0"]])
def test_a_bench_flag_given_as_zero_is_still_refused_by_a_benchmark_that_does_not_read_it(argv, capsys):
    from fedjax_clust.cli.commands import main

    assert main(["bench", *argv]) == 2
    assert f"{argv[2]} does not apply to --model {argv[1]}" in capsys.readouterr().err
