"""Partitioning a data set into clients: a household that cannot train is named."""

from __future__ import annotations

import pytest

from engage.errors import DataError
from engage.federated.partition import partition
from engage.spec import parse_spec

# Seed 11 of the generator has a household (h08) occupied through its whole train split.
SPEC = """
name: fl
data:
  source: {type: synthetic, households: 20, days: 7, seed: 11}
  features: [temperature, humidity, co2, motion, power]
  target: occupied
  task: classification
  window: 30
  stride: 10
model: {name: mlp}
federated: {rounds: 1}
"""


def test_a_household_with_one_class_in_its_train_split_is_named() -> None:
    with pytest.raises(DataError) as err:
        partition(parse_spec(SPEC))

    assert err.value.message.startswith("household h08: the train split has only one class")
    assert err.value.hint
