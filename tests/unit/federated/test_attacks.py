"""The two attack registries: every kind the spec accepts is registered and documented,
and an unknown kind names the valid ones."""

from __future__ import annotations

from typing import get_args

import pytest

from engage.federated.attacks import (
    CLIENT_ATTACKS,
    TRANSIT_ATTACKS,
    make_channel,
    make_client_attack,
)
from engage.spec.models import ClientAttackKind, TransitAttackKind, TransitAttackSpec


def test_the_registries_hold_exactly_the_kinds_the_spec_accepts() -> None:
    assert CLIENT_ATTACKS.names() == sorted(get_args(ClientAttackKind))
    assert TRANSIT_ATTACKS.names() == sorted(get_args(TransitAttackKind))


@pytest.mark.parametrize(
    ("name", "cls"),
    [*CLIENT_ATTACKS.items(), *TRANSIT_ATTACKS.items()],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_every_attack_is_documented(name: str, cls: type) -> None:
    assert cls.__doc__
    assert cls.description
    assert cls.name == name


def test_an_unknown_client_attack_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown client attack 'flood'") as caught:
        make_client_attack("flood")

    assert "sign_flip" in str(caught.value)


def test_an_unknown_transit_attack_lists_the_valid_ones() -> None:
    spec = TransitAttackSpec.model_construct(kind="flood", probability=0.5, params={})

    with pytest.raises(ValueError, match="unknown transit attack 'flood'") as caught:
        make_channel([spec], seed=0)

    assert "bit_flip" in str(caught.value)


def test_an_unknown_attack_parameter_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown parameter"):
        make_client_attack("boosting", {"facter": 3})
