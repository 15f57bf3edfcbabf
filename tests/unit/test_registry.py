"""The generic registry every extension point uses: names, duplicates, unknown-name errors."""

from __future__ import annotations

import pickle

import pytest

from engage.errors import DataError, EngageError
from engage.registry import Registry


class Thing:
    """An item with a ``name`` attribute, as registered classes have."""

    name = "thing"


def test_decorator_without_a_name_uses_the_name_attribute() -> None:
    registry: Registry[type] = Registry("widget")

    @registry.register()
    class Widget:
        name = "w"

    assert registry.get("w") is Widget
    assert "w" in registry


def test_decorator_with_a_name_overrides_the_attribute() -> None:
    registry: Registry[type] = Registry("widget")

    decorated = registry.register("other")(Thing)

    assert decorated is Thing
    assert registry.names() == ["other"]
    assert "thing" not in registry


def test_add_registers_functions_by_explicit_name() -> None:
    registry: Registry[object] = Registry("hook")

    def hook() -> None:
        """A registered function (functions have no ``name`` attribute)."""

    registry.add(hook, "h")

    assert registry.get("h") is hook


@pytest.mark.parametrize("name", ["", None, 3])
def test_an_item_needs_a_non_empty_string_name(name: object) -> None:
    registry: Registry[object] = Registry("widget")
    item = type("Nameless", (), {"name": name})

    with pytest.raises(ValueError, match="a widget needs a non-empty string name"):
        registry.add(item)

    assert len(registry) == 0


def test_a_second_item_under_a_taken_name_is_refused() -> None:
    registry: Registry[type] = Registry("widget")
    registry.add(Thing)
    impostor = type("Impostor", (), {"name": "thing"})

    with pytest.raises(ValueError, match="widget 'thing' is already registered"):
        registry.add(impostor)

    assert registry.get("thing") is Thing


def test_registering_the_same_item_again_is_harmless() -> None:
    registry: Registry[type] = Registry("widget")

    registry.add(Thing)
    registry.add(Thing)

    assert registry.names() == ["thing"]


def test_unknown_name_with_keyerror_lists_the_valid_names() -> None:
    registry: Registry[type] = Registry("widget")
    registry.add(Thing, "b")
    registry.add(Thing, "a")

    with pytest.raises(KeyError) as caught:
        registry.get("c")

    assert str(caught.value) == "\"unknown widget 'c'; registered: a, b\""


def test_unknown_name_with_an_engage_error_puts_the_names_in_the_hint() -> None:
    registry: Registry[type] = Registry("data source", DataError)
    registry.add(Thing, "csv")

    with pytest.raises(DataError) as caught:
        registry.get("sql")

    error = caught.value
    assert isinstance(error, EngageError)
    assert (error.message, error.hint) == ("unknown data source 'sql'", "use one of: csv")
    back = pickle.loads(pickle.dumps(error))
    assert (back.message, back.hint) == (error.message, error.hint)


def test_unknown_name_in_an_empty_registry_says_none_are_registered() -> None:
    registry: Registry[type] = Registry("widget", ValueError)

    error = registry.unknown("x")

    assert isinstance(error, ValueError)
    assert str(error) == "unknown widget 'x'; registered: (none registered)"


def test_names_items_and_iteration_are_sorted() -> None:
    registry: Registry[str] = Registry("letter")
    for name in ["c", "a", "b"]:
        registry.add(name.upper(), name)

    assert registry.names() == ["a", "b", "c"]
    assert list(registry) == ["a", "b", "c"]
    assert registry.items() == [("a", "A"), ("b", "B"), ("c", "C")]
    assert len(registry) == 3
