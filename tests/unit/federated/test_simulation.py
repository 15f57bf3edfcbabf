"""The server with in-process clients: every poisoning attack is detected by name, every
in-transit attack is rejected with its reason and never reaches aggregation, stragglers,
dropouts and quarantine behave. Real local training on a small smart-living partition."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from engage.federated import report, wire
from engage.federated.keys import KeyStore
from engage.federated.partition import partition
from engage.federated.simulation import build
from engage.federated.verify import Reason
from engage.spec import parse_spec

SPEC = """
name: fl-test
data:
  source: {type: synthetic, households: 10, days: 3, seed: 3}
  features: [temperature, humidity, co2, motion, power]
  target: occupied
  task: classification
  window: 30
  stride: 15
model: {name: mlp, params: {hidden: 16, layers: 1}}
federated:
  rounds: 3
  learning_rate: 0.001
  local_epochs: 2
  quarantine_after: 0
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    loaded = parse_spec(SPEC)
    data = partition(loaded)
    keys = KeyStore(tmp_path_factory.mktemp("keys"))
    keys.provision(data.ids, "hmac-sha256")
    return loaded, data, keys


def _sim(setup, *sets: str):
    loaded, data, keys = setup
    fed = parse_spec(SPEC, overrides=list(sets)).spec.federated
    return build(fed, loaded.spec.model, data, keys, use_ray=False)


def _run(sim, rounds: int = 3):
    return [sim.server.run_round(r) for r in range(1, rounds + 1)]


ATTACKS = [
    ("sign_flip", "{}"),
    ("boosting", "{}"),
    ("gaussian_noise", "{}"),
    ("label_flip", "{}"),
    ("free_ride", "{mode: zero}"),
    ("free_ride", "{mode: stale}"),
    ("sybil", "{}"),
]


@pytest.mark.parametrize(("kind", "params"), ATTACKS, ids=[f"{k}-{p}" for k, p in ATTACKS])
def test_each_poisoning_attack_is_detected_naming_the_malicious_clients(setup, kind, params):
    sim = _sim(
        setup,
        f"federated.attacks={{seed: 2, clients: {{kind: {kind}, fraction: 0.2, params: {params}}}}}",
    )
    malicious = set(sim.malicious)

    rounds = _run(sim)

    assert len(malicious) == 2
    caught = [set(r.flagged) for r in rounds[1:]]  # stale free riding needs one past round
    assert any(malicious <= c for c in caught), (malicious, caught)
    assert all(c == malicious for c in caught), (malicious, caught)  # and no benign client
    for r in rounds:
        assert not (set(r.aggregated) & set(r.flagged))  # flagged updates never aggregated
    rows = {v.client: v for v in report.verdicts(rounds, sim.server.clients, sim.malicious)}
    assert all(rows[c].flagged and rows[c].verdict != "ok" for c in malicious)


@pytest.mark.parametrize(
    ("kind", "reasons"),
    [
        ("bit_flip", {Reason.MALFORMED, Reason.BAD_SIGNATURE, Reason.TAMPERED}),
        ("scaling", {Reason.TAMPERED}),
        ("substitution", {Reason.BAD_SIGNATURE}),
        ("replay", {Reason.REPLAYED}),
        ("delay", {Reason.STALE_ROUND}),
    ],
)
def test_in_transit_attacks_are_rejected_with_their_reason_and_never_aggregated(
    setup, kind, reasons
):
    sim = _sim(setup, f"federated.attacks={{in_transit: [{{kind: {kind}, probability: 0.5}}]}}")

    rounds = _run(sim)

    hit = [(d, v) for r in rounds for d, v in r.verdicts if d.attack == kind]
    assert hit
    assert all(not v.accepted for _, v in hit if kind != "replay") or kind == "replay"
    got = {v.reason for _, v in hit if not v.accepted}
    assert got
    assert got <= reasons | {Reason.REPLAYED}
    for r in rounds:
        bad = {v.client for _, v in r.verdicts if not v.accepted}
        clean = {v.client for _, v in r.verdicts if v.accepted}
        assert set(r.aggregated) <= clean
        assert not (bad - clean) & set(r.aggregated)


def test_dropped_updates_leave_the_round_to_the_others(setup):
    sim = _sim(setup, "federated.attacks={in_transit: [{kind: drop, probability: 0.3}]}")

    r = sim.server.run_round(1)

    assert len(r.verdicts) < len(r.selected)
    assert len(r.aggregated) == len(r.verdicts) - len(r.flagged)
    assert not r.skipped


def test_a_client_slower_than_the_timeout_is_a_straggler(setup):
    sim = _sim(
        setup,
        "federated.timeout_seconds=1",
        "federated.attacks={in_transit: [{kind: delay, probability: 1.0, params: {seconds: 5}}]}",
    )

    r = sim.server.run_round(1)

    assert sorted(r.stragglers) == sorted(r.selected)
    assert r.skipped
    assert r.aggregated == []


def test_a_repeatedly_flagged_client_is_quarantined_and_no_longer_sampled(setup):
    sim = _sim(
        setup,
        "federated.quarantine_after=2",
        "federated.attacks={seed: 2, clients: {kind: boosting, fraction: 0.2}}",
    )

    rounds = _run(sim, 3)

    quarantined = sim.server.policy.quarantined
    assert set(sim.malicious) <= quarantined
    assert not set(rounds[2].selected) & set(sim.malicious)
    events = report.round_events(rounds[1])
    assert {e.labels["client"] for e in events if e.name == "fl_quarantined"} >= set(sim.malicious)


def test_without_attacks_training_improves_the_global_model(setup):
    sim = _sim(setup, "federated.aggregator.name=fedavg", "federated.strategy=fedprox")

    rounds = _run(sim)

    assert rounds[-1].metrics["val_accuracy"] > 0.8
    assert all(not r.rejected for r in rounds)


def test_the_verdict_table_names_every_client_and_its_verdict(setup):
    sim = _sim(setup, "federated.attacks={seed: 2, clients: {kind: boosting, fraction: 0.2}}")
    rounds = _run(sim, 2)

    text = report.verdict_table(report.verdicts(rounds, sim.server.clients, sim.malicious))

    for c in sim.server.clients:
        assert c in text
    assert "boosting" in text
    assert "[" not in text  # printed through rich markup


def test_round_events_carry_scores_per_client_and_rejections_by_reason(setup):
    sim = _sim(setup, "federated.attacks={in_transit: [{kind: scaling, probability: 1.0}]}")

    events = report.round_events(sim.server.run_round(1))

    rejected = [e for e in events if e.name == "fl_update_rejected"]
    assert rejected
    assert {e.data["reason"] for e in rejected} == {"tampered"}
    assert all(e.labels["client"] for e in rejected)
    assert np.isfinite([e.value for e in events if e.kind == "metric"]).all()
    assert Path  # keep the import used by fixtures in other modules


def test_without_attacks_no_benign_household_is_flagged(setup):
    rounds = _run(_sim(setup))

    assert all(not r.flagged for r in rounds), [r.flagged for r in rounds]
    assert all(0 <= s.score < 1 for r in rounds for s in r.scores)
    assert all(s.validation != 0 for r in rounds for s in r.scores)  # the probe ran


def test_the_served_model_takes_raw_windows_with_the_pooled_statistics(setup):
    import torch

    from engage.federated.partition import pooled_normalization, raw_windows
    from engage.federated.simulation import local_training, served_metrics, served_model

    loaded, data, _ = setup
    norm = pooled_normalization(data)
    means = np.stack([c.normalization.mean for c in data.clients])
    raw = raw_windows(data.clients[0], "test")
    np.testing.assert_allclose(
        data.clients[0].normalization.apply(raw), data.clients[0].test.x, atol=1e-4
    )
    assert np.all((means.min(0) - 1e-4 <= norm.mean) & (norm.mean <= means.max(0) + 1e-4))
    training = local_training(loaded.spec.federated, loaded.spec.model, data)
    weights = np.random.default_rng(0).normal(0, 0.1, _sim(setup).server.weights.size)

    model = served_model(training, weights, data)

    with torch.no_grad():
        out = model(torch.from_numpy(raw[:3]))
    assert out.shape == (3, data.shape.outputs)
    assert 0.0 <= served_metrics(training, model, data)["served_test_accuracy"] <= 1.0


def _first_round_messages(sim) -> dict[str, bytes]:
    """The signed updates the clients send in round 1 of ``sim``, as the server receives them."""
    server = sim.server
    selected = server.sample(1)
    server.verifier.begin_round(1, set(selected), set())
    return server.collect(1, selected).messages


def test_an_update_from_another_run_is_rejected_as_a_replay(setup):
    """Keys outlive a run: round 1 of one run must not count in round 1 of the next."""
    earlier, this_run = _sim(setup), _sim(setup)
    captured = _first_round_messages(earlier)
    this_run.server.verifier.begin_round(1, set(captured), set())

    verdicts = [this_run.server.verifier.check(raw) for raw in captured.values()]

    assert verdicts
    assert {v.reason for v in verdicts} == {Reason.REPLAYED}
    assert all("another run" in v.detail for v in verdicts)
    assert not this_run.server.run_round(1).rejected  # its own clients still get through


def test_a_signed_inflated_sample_count_is_bound_to_what_the_server_assigned(setup):
    """A client holds its own key, so it can sign any count; FedAvg must not weight by it."""
    _, data, keys = setup
    sim = _sim(setup, "federated.aggregator.name=fedavg")
    messages = _first_round_messages(sim)
    client = sorted(messages)[0]
    header, payload = wire.unpack(messages[client], 1 << 30)
    inflated = dataclasses.replace(header, num_samples=10**12, signature=None)
    signature = keys.signer(client, "hmac-sha256").sign(inflated.signed_bytes()).hex()
    raw = wire.pack(dataclasses.replace(inflated, signature=signature), payload)
    assigned = {c.client: len(c.train.y) for c in data.clients}

    verdict = sim.server.verifier.check(raw)

    assert verdict.accepted
    assert verdict.update.num_samples == assigned[client]
    assert "clamped" in verdict.detail


def test_honest_sample_counts_pass_unchanged(setup):
    _, data, _ = setup
    sim = _sim(setup)
    messages = _first_round_messages(sim)
    assigned = {c.client: len(c.train.y) for c in data.clients}

    verdicts = [sim.server.verifier.check(raw) for raw in messages.values()]

    assert all(v.accepted and v.detail == "" for v in verdicts)
    assert {v.client: v.update.num_samples for v in verdicts} == {c: assigned[c] for c in messages}
