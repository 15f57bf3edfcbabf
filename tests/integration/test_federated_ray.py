"""Federated clients as real Ray actors: a straggler past the timeout and a dead actor do
not stop a round; the straggler's late update is collected and rejected as stale.

Every round here has a straggler (the delay attack's seeded draws: a client of each
round), so each waits out the whole round timeout. The timeout is what an honest client
needs with margin: its actor's start (torch's imports) is awaited before round 1 and its
round is a few milliseconds of training (tests/unit/federated/test_client_start.py), so
6 s holds on two loaded cores. The delay (7 s) is past it, and the round-1 straggler's
update lands during round 2 (which itself waits 6 s for its straggler): round 2
collects it late, as the test asserts.
"""

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
  timeout_seconds: 6
  attacks: {in_transit: [{kind: delay, probability: 0.34, params: {seconds: 7}}]}
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
