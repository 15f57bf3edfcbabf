"""train.loader: auto: the search, its memory back-off and time budget, the spec, the record."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from engage.spec.models import ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loader_search import (
    Candidate,
    candidate_space,
    memory_budget,
    predicted_rate,
    prefetch_variants,
    search,
    two_phase_search,
)
from engage.train.loader_tune import ARTIFACT, apply, record
from engage.train.loop import TrainJob

GIB = 2**30


def _rate(c: Candidate) -> float:
    """A fake loader: more workers help up to 2, prefetch 4 is the sweet spot."""
    return 1000.0 * min(c.workers, 2) + 100.0 * (4 - abs(c.prefetch - 4)) + c.batch / 1000


def _search(candidates, **kw):
    kw.setdefault("budget_bytes", 8 * GIB)
    kw.setdefault("footprint", lambda c: c.prefetch * max(1, c.workers) * 2**20)
    kw.setdefault("available", lambda: 16 * GIB)
    return search(candidates, kw.pop("time_fn", _rate), **kw)


def test_the_fastest_candidate_is_chosen_and_every_trial_kept() -> None:
    space = candidate_space(64, cores=4)

    result = _search(space)

    assert result.chosen == Candidate(prefetch=2, workers=2, batch=64, cache="memory")
    assert [t.candidate for t in result.trials] == space
    assert all(t.samples_per_s is not None for t in result.trials)


def test_the_second_phase_tries_the_fastest_kinds_other_prefetch_depths() -> None:
    kinds = candidate_space(64, cores=4)

    result = two_phase_search(
        kinds,
        _rate,
        time_budget_s=60.0,
        budget_bytes=8 * GIB,
        footprint=lambda c: 2**20,
        available=lambda: 16 * GIB,
    )

    assert result.chosen == Candidate(prefetch=4, workers=2, batch=64, cache="memory")
    tried = [t.candidate for t in result.trials]
    assert tried == kinds + prefetch_variants(Candidate(2, 2, 64, "memory"))
    assert prefetch_variants(Candidate(1, 0, 64)) == []  # inline loading has no queue


def test_near_ties_go_to_the_cheapest_candidate_tried_first() -> None:
    inline, worker = Candidate(1, 0, 64), Candidate(2, 1, 64)

    result = _search([inline, worker], time_fn=lambda c: 1000.0 if c.workers else 980.0)

    assert result.chosen == inline  # 2% slower measured, one process fewer


def test_loader_workers_overlap_the_step_and_inline_loading_does_not() -> None:
    inline, worker = Candidate(1, 0, 64), Candidate(2, 1, 64)
    # the loader alone: 1000 windows/s; the step: 1 ms per window
    assert predicted_rate(inline, 1000.0, 0.001) == pytest.approx(500.0)
    assert predicted_rate(worker, 1000.0, 0.001) == pytest.approx(1000.0)
    assert predicted_rate(worker, 4000.0, 0.001) == pytest.approx(1000.0)  # compute-bound
    assert predicted_rate(worker, 0.0, 0.001) == 0.0


def test_the_space_grows_batch_only_when_the_spec_opts_in() -> None:
    assert {c.batch for c in candidate_space(64, cores=4)} == {64}
    assert {c.batch for c in candidate_space(64, cores=4, tune_batch=True)} == {32, 64, 128}
    # one core: the training step's; no loader workers to add
    assert {c.workers for c in candidate_space(64, cores=1)} == {0}


def test_a_candidate_over_the_memory_budget_is_never_run() -> None:
    ran: list[Candidate] = []
    big = Candidate(prefetch=8, workers=4, batch=64)
    small = Candidate(prefetch=1, workers=0, batch=64)

    result = _search(
        [small, big],
        time_fn=lambda c: ran.append(c) or _rate(c),
        footprint=lambda c: 3 * GIB if c is big else 2**20,
        budget_bytes=2 * GIB,
    )

    assert ran == [small]
    assert result.chosen == small
    assert "over the" in result.trials[1].skipped


def test_the_search_backs_off_when_free_memory_runs_close() -> None:
    free = iter([4 * GIB, 600 * 2**20, 4 * GIB])  # something else took memory meanwhile
    a, b, c = (Candidate(p, 1, 64) for p in (1, 2, 4))

    result = _search([a, b, c], available=lambda: next(free), footprint=lambda _: 200 * 2**20)

    assert [t.samples_per_s is not None for t in result.trials] == [True, False, True]
    assert "backed off" in result.trials[1].skipped
    assert result.chosen == c


def test_the_time_budget_ends_the_search_and_the_rest_is_recorded_as_not_tried() -> None:
    now = [0.0]

    def slow(c: Candidate) -> float:
        now[0] += 2.0
        return _rate(c)

    result = _search(
        candidate_space(64, cores=4), time_fn=slow, time_budget_s=5.0, clock=lambda: now[0]
    )

    timed = [t for t in result.trials if t.samples_per_s is not None]
    assert len(timed) == 3  # at 0, 2 and 4 s; the budget is spent at 6
    assert all("not tried" in t.skipped for t in result.trials[3:])
    assert result.chosen in [t.candidate for t in timed]


def test_nothing_timed_keeps_the_first_candidate_and_says_so() -> None:
    first = Candidate(prefetch=1, workers=0, batch=64)

    result = _search([first], budget_bytes=0)

    assert result.chosen == first
    assert result.notes


def test_the_budget_is_a_share_of_what_the_node_has_free() -> None:
    assert memory_budget(0.5, available=lambda: 8 * GIB) == 4 * GIB
    with pytest.raises(ValueError, match="memory fraction"):
        memory_budget(1.5, available=lambda: GIB)


def test_the_spec_is_off_by_default_and_refuses_other_modes() -> None:
    spec = TrainSpec()

    assert spec.loader == "default"
    assert spec.loader_search.tune_batch_size is False
    assert TrainSpec(loader="auto", loader_search={"time_budget_seconds": 2}).loader == "auto"
    with pytest.raises(ValidationError, match="loader"):
        TrainSpec(loader="fast")
    with pytest.raises(ValidationError, match="memory_fraction"):
        TrainSpec(loader_search={"memory_fraction": 1.0})


def _job(**train: object) -> TrainJob:
    spec = TrainSpec(loader="auto", batch_size=128, num_workers=2, **train)
    return TrainJob(
        spec, ModelSpec(name="mlp"), "classification", ModelShape(4, 2, 2), None, None, ""
    )


def test_the_job_takes_the_prefetch_and_the_batch_only_when_opted_in() -> None:
    result = _search([Candidate(prefetch=8, workers=2, batch=32)])

    kept, said = apply(result, _job())
    moved, _ = apply(result, _job(loader_search={"tune_batch_size": True}))

    assert (kept.prefetch_batches, kept.train.batch_size) == (8, 128)
    assert (moved.prefetch_batches, moved.train.batch_size) == (8, 64)  # 32 per worker x 2
    assert said["batch"].startswith("not applied")
    assert said["prefetch"].startswith("not applied")  # an in-memory split: no shard to prefetch
    assert said["workers"].startswith("not applied")


class _Run:
    def __init__(self) -> None:
        self.params: dict = {}
        self.artifacts: dict = {}

    def log_params(self, resolved_spec) -> None:
        self.params.update(resolved_spec)

    def log_dict(self, data, artifact_file: str) -> None:
        self.artifacts[artifact_file] = json.loads(json.dumps(data))


def test_the_choice_and_every_candidates_throughput_are_recorded_with_the_run() -> None:
    result = _search(candidate_space(64, cores=2))
    run = _Run()

    record(result, run)

    assert run.params["loader.prefetch"] == str(result.chosen.prefetch)
    assert float(run.params["loader.samples_per_s"]) == pytest.approx(_rate(result.chosen), 0.01)
    evidence = run.artifacts[ARTIFACT]
    assert len(evidence["trials"]) == len(result.trials)
    assert {"prefetch", "workers", "batch", "cache", "samples_per_s"} <= set(evidence["trials"][0])


def test_real_trials_of_the_loader_alone_time_each_candidate(tmp_path) -> None:
    from types import SimpleNamespace

    import numpy as np

    from engage.train.loader_tune import tune_loader

    x = np.zeros((256, 8, 2), dtype=np.float32)
    data = SimpleNamespace(train=SimpleNamespace(x=x, y=np.zeros(256, np.int64)), preprocess=None)

    result = tune_loader(data, 32, cores=1, time_budget_s=2.0, memory_fraction=0.5, folder=tmp_path)

    assert {t.candidate.cache for t in result.trials} == {"memory", "storage"}
    assert all(t.samples_per_s and t.samples_per_s > 0 for t in result.trials)


def test_a_streamed_split_too_large_for_memory_is_never_cached(tmp_path) -> None:
    from types import SimpleNamespace

    import numpy as np

    from engage.train.loader_tune import tune_loader

    x = np.zeros((256, 8, 2), dtype=np.float32)  # the sample the data stage holds
    split = SimpleNamespace(x=x, y=np.zeros(256, np.int64))
    data = SimpleNamespace(train=split, preprocess=None, train_windows=10**12)

    result = tune_loader(data, 32, cores=1, time_budget_s=2.0, memory_fraction=0.5, folder=tmp_path)

    cached = [t for t in result.trials if t.candidate.cache == "memory"]
    assert cached
    assert all("over the" in t.skipped for t in cached)
    assert result.chosen.cache == "storage"


def test_a_job_on_loader_auto_is_timed_recorded_and_given_the_choice(monkeypatch) -> None:
    # What the train stage calls before it starts Ray Train (runtime/stages.py). One core:
    # candidates with loader worker processes are test_real_trials' to time, not this one's.
    from types import SimpleNamespace

    import numpy as np

    from engage.profiler import cores
    from engage.train.loader_tune import tune_for_job

    monkeypatch.setattr(cores, "usable_cores", lambda: 1)

    rng = np.random.default_rng(0)
    split = SimpleNamespace(
        x=rng.normal(size=(512, 4, 2)).astype(np.float32), y=np.zeros(512, np.int64)
    )
    data = SimpleNamespace(
        train=split, preprocess=None, train_windows=512, model_inputs=lambda name: split.x
    )
    job = _job(loader_search={"time_budget_seconds": 1.0})
    run = _Run()

    tuned, result = tune_for_job(job, data, run)

    assert tuned.prefetch_batches == result.chosen.prefetch
    assert tuned.train.batch_size == 128  # not opted in: the global batch stays
    assert run.params["loader.prefetch"] == str(result.chosen.prefetch)
    assert any("training step alone" in note for note in result.notes)
    assert run.artifacts[ARTIFACT]["trials"]


def test_each_worker_is_searched_on_its_share_of_the_nodes_cores(monkeypatch) -> None:
    # Two one-CPU workers on a two-core node leave no core for a loader thread or process.
    from types import SimpleNamespace

    import numpy as np

    from engage.profiler import cores
    from engage.train.loader_tune import tune_for_job

    monkeypatch.setattr(cores, "usable_cores", lambda: 2)
    rng = np.random.default_rng(0)
    split = SimpleNamespace(
        x=rng.normal(size=(512, 4, 2)).astype(np.float32), y=np.zeros(512, np.int64)
    )
    data = SimpleNamespace(
        train=split, preprocess=None, train_windows=512, model_inputs=lambda name: split.x
    )

    def job(workers: int) -> TrainJob:
        spec = TrainSpec(
            loader="auto", batch_size=64 * workers, num_workers=workers,
            loader_search={"time_budget_seconds": 30.0},
        )  # fmt: skip
        shape = ModelShape(4, 2, 2)
        return TrainJob(spec, ModelSpec(name="mlp"), "classification", shape, None, None, "")

    _, two = tune_for_job(job(2), data)
    _, one = tune_for_job(job(1), data)

    assert {(t.candidate.workers, t.candidate.thread) for t in two.trials} == {(0, False)}
    assert any(t.candidate.thread for t in one.trials)
    assert any("2 training workers" in note for note in two.notes)
