"""Federated clients as real Ray actors: a straggler past the timeout and a dead actor do
not stop a round; the straggler's late update is collected and rejected as stale."""

from __future__ import annotations

import pytest

from engage.federated.keys import KeyStore
from engage.federated.partition import partition
from engage.federated.simulation import build
from engage.federated.verify import Reason
from engage.spec import parse_spec

pytestmark = pytest.mark.integration

SPEC = """
name: fl-ray
data:
  source: {type: synthetic, households: 3, days: 3, seed: 3}
  features: [temperature, humidity, co2, motion, power]
  target: occupied
  task: classification
  window: 30
  stride: 15
model: {name: mlp, params: {hidden: 8, layers: 1}}
federated:
  rounds: 3
  min_clients: 1
  timeout_seconds: 20
  attacks: {in_transit: [{kind: delay, probability: 0.34, params: {seconds: 25}}]}
"""


def test_stragglers_and_dropouts_on_ray_actors(ray_local, tmp_path) -> None:
    import ray

    loaded = parse_spec(SPEC)
    data = partition(loaded)
    keys = KeyStore(tmp_path)
    keys.provision(data.ids, "hmac-sha256")
    sim = build(loaded.spec.federated, loaded.spec.model, data, keys, use_ray=True)
    server = sim.server
    try:
        rounds = []
        for r in range(1, 4):
            rounds.append(server.run_round(r))
            if r == 1:
                dead = next(c for c in data.ids if c not in rounds[0].stragglers)
                ray.kill(server.pool.actors[dead])
        stragglers = {c for r in rounds for c in r.stragglers}
        dropped = {c for r in rounds for c in r.dropped}
        late = [v for r in rounds for d, v in r.verdicts if d.attack == "late"]
    finally:
        server.pool.close()

    assert stragglers, "the delay attack should have made a straggler"
    assert dead in dropped
    assert all(not r.skipped or not r.aggregated for r in rounds)
    assert late
    assert all(v.reason == Reason.STALE_ROUND for v in late)
