"""Federated defences: detection precision/recall per attack, false positives on benign
non-IID clients, final accuracy against no attack and against plain FedAvg, time per round.

20 households of the smart-living generator (7 days, window 30, stride 10), one client each,
30 % malicious, every client sampled every round. Clients run in-process (the same client,
signing, verification, scoring and aggregation code as on Ray actors; the Ray transport is
covered by the tests) so the figures measure the defences, not actor start-up.

    .venv/bin/python benchmarks/federated_defences.py     # writes its section of docs/BENCHMARKS.md
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import git_commit, machine, write_section

from engage.federated.keys import KeyStore
from engage.federated.partition import partition
from engage.federated.simulation import Evaluator, build, local_training
from engage.spec import parse_spec

ROUNDS = 10
FRACTION = 0.3
SPEC = f"""
name: fl-bench
data:
  source: {{type: synthetic, households: 20, days: 7, seed: 3}}
  features: [temperature, humidity, co2, motion, power]
  target: occupied
  task: classification
  window: 30
  stride: 10
model: {{name: mlp, params: {{hidden: 32, layers: 2}}}}
federated:
  rounds: {ROUNDS}
  local_epochs: 2
  learning_rate: 0.001
  quarantine_after: 0
"""
ATTACKS = [
    ("sign_flip", "{}"),
    ("boosting", "{}"),
    ("gaussian_noise", "{}"),
    ("label_flip", "{}"),
    ("free_ride", "{mode: zero}"),
    ("free_ride", "{mode: stale}"),
    ("sybil", "{}"),
]
DEFENDED = ["federated.aggregator.name=median"]
ROBUST_ONLY = ["federated.aggregator.name=median", "federated.scoring.enabled=false"]
PLAIN = ["federated.aggregator.name=fedavg", "federated.scoring.enabled=false"]


def _attack(kind: str, params: str) -> str:
    return (
        f"federated.attacks={{seed: 1, clients: {{kind: {kind}, fraction: {FRACTION}, "
        f"params: {params}}}}}"
    )


def run(data, keys, sets: list[str]) -> dict:
    loaded = parse_spec(SPEC, overrides=sets)
    fed = loaded.spec.federated
    sim = build(fed, loaded.spec.model, data, keys, use_ray=False)
    malicious, honest = set(sim.malicious), set(data.ids) - set(sim.malicious)
    precision, recall, fp, scored_honest, seconds = [], [], 0, 0, []
    for r in range(1, ROUNDS + 1):
        res = sim.server.run_round(r)
        seconds.append(res.seconds)
        if not res.scores:
            continue
        flagged = set(res.flagged)
        fp += len(flagged & honest)
        scored_honest += len({s.client for s in res.scores} & honest)
        if malicious:
            recall.append(len(flagged & malicious) / len(malicious))
            precision.append(len(flagged & malicious) / len(flagged) if flagged else 1.0)
    test = Evaluator(local_training(fed, loaded.spec.model, data), data, "test")
    return {
        "accuracy": test(sim.server.weights)["test_accuracy"],
        "precision": statistics.mean(precision) if precision else None,
        "recall": statistics.mean(recall) if recall else None,
        "fp_rate": fp / scored_honest if scored_honest else None,
        "round_s": statistics.median(seconds),
    }


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def main() -> None:
    started = time.perf_counter()
    data = partition(parse_spec(SPEC))
    keys = KeyStore(Path(tempfile.mkdtemp()) / "keys")
    keys.provision(data.ids, "hmac-sha256")
    base = run(data, keys, DEFENDED)
    base_plain = run(data, keys, PLAIN)
    rows = []
    for kind, params in ATTACKS:
        attack = [_attack(kind, params)]
        defended = run(data, keys, DEFENDED + attack)
        robust = run(data, keys, ROBUST_ONLY + attack)
        plain = run(data, keys, PLAIN + attack)
        name = kind if params == "{}" else f"{kind} {params.strip('{}')}"
        rows.append((name, defended, robust, plain))
        print(name, defended, robust["accuracy"], plain["accuracy"], flush=True)
    write_section("federated", _render(base, base_plain, rows, time.perf_counter() - started))


def _render(base, base_plain, rows, total_s: float) -> str:
    lines = [
        "## Federated defences (`benchmarks/federated_defences.py`)",
        "",
        f"Machine: {machine()}; commit {git_commit()}; {total_s / 60:.1f} min in all.",
        "",
        f"20 clients (one smart-living household each, non-IID: every household has its own "
        f"routine; 7 days, window 30, stride 10, MLP 32x2), {ROUNDS} rounds, all clients "
        f"every round, 2 local epochs (Adam, lr 0.001), {FRACTION:.0%} malicious clients "
        "(6 of 20). *Defended*: signed updates, anomaly scoring with flagged updates left "
        "out, coordinate-wise median. *Robust only*: the median without scoring. *Plain*: "
        "FedAvg without scoring. Precision and recall are per round (flagged vs. truly "
        "malicious clients), averaged over rounds; the false-positive rate is flagged benign "
        "clients over benign clients scored. Accuracy is the global model's on every "
        "client's held-out test windows after the last round. Time per round is the median "
        "wall time of a round with 20 clients training one after the other in one process "
        "(2 cores): local training, signing, verification, scoring, aggregation, validation.",
        "",
        f"No attack: defended accuracy {base['accuracy']:.4f}, plain FedAvg "
        f"{base_plain['accuracy']:.4f}; false positives on benign clients "
        f"{_pct(base['fp_rate'])}; {base['round_s']:.2f} s per round "
        f"(plain FedAvg {base_plain['round_s']:.2f} s).",
        "",
        "| attack | precision | recall | benign FP rate | accuracy defended | vs no attack "
        "| robust only | plain FedAvg | s / round |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, d, robust, plain in rows:
        delta = 100 * (d["accuracy"] - base["accuracy"])
        lines.append(
            f"| {name} | {_pct(d['precision'])} | {_pct(d['recall'])} | {_pct(d['fp_rate'])} "
            f"| {d['accuracy']:.4f} | {delta:+.1f} pts | {robust['accuracy']:.4f} "
            f"| {plain['accuracy']:.4f} | {d['round_s']:.2f} |"
        )
    met = [
        n
        for n, d, _, _ in rows
        if d["precision"] >= 0.95 and d["recall"] >= 0.95 and (d["fp_rate"] or 0) <= 0.05
    ]
    close = [n for n, d, _, _ in rows if abs(d["accuracy"] - base["accuracy"]) <= 0.02]
    lines += [
        "",
        f"Targets (precision and recall >= 95 %, benign FP <= 5 %) met for: "
        f"{', '.join(met) or 'none'}. Within 2 points of the no-attack accuracy: "
        f"{', '.join(close) or 'none'}.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
