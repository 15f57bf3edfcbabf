"""Meta test over every extension point: each is one :class:`engage.registry.Registry`.

Every registry engage knows of (sources, model builders, drift detectors, aggregators, the
client and in-transit attacks, job kinds) must be a ``Registry``; every registered item
carries its own docstring; an unknown name raises an error that lists the valid names.
Registries are also discovered by scanning the extension packages, so a new one is held
to the same rules without editing this file.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

from engage.registry import Registry

# Where each extension point's registry lives: (label, module, attribute, Registry.kind).
EXPECTED = [
    ("data sources", "engage.data.sources", "SOURCES", "data source"),
    ("model builders", "engage.train.builders", "MODEL_BUILDERS", "model builder"),
    ("drift detectors", "engage.drift", "DETECTORS", "drift detector"),
    ("aggregators", "engage.federated.aggregators", "AGGREGATORS", "aggregator"),
    ("client attacks", "engage.federated.attacks", "CLIENT_ATTACKS", "client attack"),
    ("transit attacks", "engage.federated.attacks", "TRANSIT_ATTACKS", "transit attack"),
    ("job kinds", "engage.runtime.kinds", "JOB_KINDS", "job kind"),
]

# Packages whose modules are scanned for Registry instances.
SCANNED = ["engage.data", "engage.train", "engage.drift", "engage.federated", "engage.runtime"]


IMPORT_FAILURES: dict[str, str] = {}


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # reported by test_scanned_modules_import, not here
        IMPORT_FAILURES[name] = f"{type(exc).__name__}: {exc}"
        return None


def _modules(package: str) -> list[ModuleType]:
    root = _import(package)
    if root is None:
        return []
    names = [info.name for info in pkgutil.iter_modules(root.__path__, f"{package}.")]
    return [root, *filter(None, map(_import, names))]


def _defines(module: ModuleType, attr: str) -> bool:
    """Whether ``module`` creates the registry ``attr`` rather than importing it."""
    lines = inspect.getsource(module).splitlines()
    return any(line.startswith(attr) and "Registry(" in line for line in lines)


def _discover() -> dict[int, tuple[str, Registry]]:
    """Every Registry found at module level in the scanned packages, by identity, each
    named by the module that creates it."""
    found: dict[int, tuple[str, Registry]] = {}
    for package in SCANNED:
        for module in _modules(package):
            for attr, value in vars(module).items():
                if not isinstance(value, Registry):
                    continue
                if id(value) not in found or _defines(module, attr):
                    found[id(value)] = (f"{module.__name__}.{attr}", value)
    return found


DISCOVERED = _discover()
BY_KIND = {registry.kind: (where, registry) for where, registry in DISCOVERED.values()}


def _expected(kind: str, module: str, attr: str) -> object:
    """The registry of ``kind``: a discovered Registry, else whatever ``module.attr`` is."""
    if kind in BY_KIND:
        return BY_KIND[kind][1]
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def _load_every_detector(registry: Registry) -> None:
    """Drift detectors backed by alibi-detect register when first asked for: ask for all."""
    drift = importlib.import_module("engage.drift")
    for name in drift.detector_names():
        if name not in registry:
            drift.make_detector(name)


LOADERS = {"drift detector": _load_every_detector}


def _own_doc(item: object) -> str | None:
    """The docstring the item itself declares (a class's is never inherited from a base)."""
    if inspect.isclass(item):
        return vars(item).get("__doc__")
    return getattr(item, "__doc__", None) if inspect.isroutine(item) else type(item).__doc__


def test_scanned_modules_import() -> None:
    assert IMPORT_FAILURES == {}


@pytest.mark.parametrize(
    ("label", "module", "attr", "kind"), EXPECTED, ids=[row[0] for row in EXPECTED]
)
def test_extension_point_is_a_registry(label: str, module: str, attr: str, kind: str) -> None:
    registry = _expected(kind, module, attr)

    assert registry is not None, f"{label}: no registry found at {module}.{attr}"
    assert isinstance(registry, Registry), (
        f"{label} ({module}.{attr}) is a {type(registry).__name__}, "
        "not yet an engage.registry.Registry"
    )
    assert registry.kind == kind


@pytest.mark.parametrize(
    "registry", [r for _, r in DISCOVERED.values()], ids=[w for w, _ in DISCOVERED.values()]
)
def test_every_registered_item_has_its_own_docstring(registry: Registry) -> None:
    LOADERS.get(registry.kind, lambda _: None)(registry)

    missing = [name for name, item in registry.items() if not (_own_doc(item) or "").strip()]

    assert len(registry) > 0, f"no {registry.kind} is registered"
    assert missing == [], f"{registry.kind}s without a docstring: {missing}"


@pytest.mark.parametrize(
    "registry", [r for _, r in DISCOVERED.values()], ids=[w for w, _ in DISCOVERED.values()]
)
def test_unknown_name_lists_every_valid_name(registry: Registry) -> None:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - each registry picks its class
        registry.get("no-such-name")

    message = str(caught.value)
    assert "'no-such-name'" in message
    assert ", ".join(registry.names()) in message
