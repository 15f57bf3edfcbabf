"""The search behind ``train.loader: auto``, as pure functions: candidates, budgets, choice.

A candidate is one setting of the input pipeline (:class:`Candidate`). :func:`search`
times candidates through a function it is given, skipping any that would not fit the
memory budget or would leave too little memory free (it re-reads what is free before every
trial, so it backs off when something else takes memory meanwhile), stops at its time
budget, and returns the fastest with every trial as evidence (:class:`TuneResult`).
:func:`two_phase_search` spends a short budget well: first each kind of loader (inline or
with worker processes, cached or from storage, each batch size) at the default prefetch
depth, then the other prefetch depths of the fastest only. A loader thread (batches
prepared in a background thread of the training process, on a spare core) is a kind of
loader too. Nothing here reads a clock or the node's memory unless given the default
functions, so tests pass fakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: Memory left free whatever the budget says: the back-off margin below which no trial runs.
RESERVE_BYTES = 512 * 2**20
PREFETCH_DEPTHS = (1, 2, 4, 8)
DEFAULT_PREFETCH = 2  # torch's DataLoader and Ray Data's iterators both default to 2
#: Share of the time budget the first phase (kinds of loader) may take; the rest tries the
#: fastest kind's other prefetch depths.
FIRST_PHASE = 0.6
#: Candidates within this share of the fastest count as ties, and the cheapest of them (the
#: first tried: fewer processes, less memory) is chosen: short trials cannot tell them apart.
TIE = 0.05

Cache = Literal["memory", "storage", "features"]


@dataclass(frozen=True)
class Candidate:
    """One setting of the input pipeline.

    Attributes
    ----------
    prefetch : int
        Batches loaded ahead of the step (per loader worker; Ray Data's ``prefetch_batches``
        on a streamed split).
    workers : int
        Loader processes preprocessing in parallel; 0 loads in the training process.
    batch : int
        Windows per step and worker.
    cache : str
        ``memory`` (decoded windows held in memory), ``storage`` (read every epoch) or
        ``features`` (the deterministic preprocessing's output, computed in the first epoch
        and held in memory; later epochs run only the augmentation on it).
    thread : bool
        With no loader processes: batches are prepared in a background thread of the
        training process, ``prefetch`` ahead, while the step computes (torch releases the
        GIL inside its operators); training then prepares the next epoch's augmented
        inputs of a ``features`` cache in that thread.
    """

    prefetch: int
    workers: int
    batch: int
    cache: Cache = "memory"
    thread: bool = False

    def footprint(self, window_bytes: int, dataset_bytes: int, feature_bytes: int = 0) -> int:
        """Bytes this setting holds at once: batches in flight, plus the cache when in memory.

        Each in-flight batch is counted twice (the loader's copy and the one handed over).
        ``dataset_bytes`` is what a cache of decoded windows adds, ``feature_bytes`` what a
        cache of the deterministic preprocessing's output of the whole split adds; a
        loader thread on a features cache adds that much again: the next epoch's inputs,
        prepared while the current one trains.
        """
        in_flight = self.prefetch * max(1, self.workers) * self.batch * window_bytes * 2
        cache = {"memory": dataset_bytes, "features": feature_bytes}.get(self.cache, 0)
        ahead = feature_bytes if self.thread and self.cache == "features" else 0
        return in_flight + cache + ahead


@dataclass(frozen=True)
class Trial:
    """What became of one candidate: its throughput, or why it was not run.

    ``loader_samples_per_s`` is the loader alone, as timed; ``samples_per_s`` the training
    throughput predicted from it (:func:`predicted_rate`), by which candidates are ranked,
    or, for a trial timed end to end with the training step, measured (and
    ``loader_samples_per_s`` is None).
    """

    candidate: Candidate
    samples_per_s: float | None = None
    seconds: float = 0.0
    skipped: str = ""  # why it did not run: over the memory budget, or out of time
    loader_samples_per_s: float | None = None


@dataclass(frozen=True)
class TuneResult:
    """The chosen setting and the evidence: every candidate's trial, in search order."""

    chosen: Candidate
    trials: tuple[Trial, ...]
    budget_bytes: int
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def params(self) -> dict[str, str]:
        """The choice as run parameters (``loader.*``)."""
        best = next((t for t in self.trials if t.candidate == self.chosen), None)
        rate = best.samples_per_s if best is not None else None
        return {
            "loader.mode": "auto",
            **{f"loader.{k}": str(v) for k, v in asdict(self.chosen).items()},
            "loader.samples_per_s": f"{rate:.1f}" if rate is not None else "not measured",
        }

    def evidence(self) -> dict[str, Any]:
        """Everything the search saw, for the run's ``loader_tuning.json`` artifact."""
        return {
            "chosen": asdict(self.chosen),
            "memory_budget_bytes": self.budget_bytes,
            "search_seconds": round(self.seconds, 3),
            "notes": list(self.notes),
            "trials": [
                {
                    **asdict(t.candidate),
                    "samples_per_s": t.samples_per_s,
                    "loader_samples_per_s": t.loader_samples_per_s,
                    "seconds": round(t.seconds, 4),
                    "skipped": t.skipped,
                }
                for t in self.trials
            ],
        }


def memory_budget(fraction: float, available: Callable[[], int] | None = None) -> int:
    """``fraction`` of the node's available memory now, in bytes (psutil's reading).

    Raises
    ------
    ValueError
        If ``fraction`` is not in (0, 1].
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"memory fraction must be in (0, 1], got {fraction}")
    return int(fraction * (available or available_memory)())


def available_memory() -> int:
    """Bytes of memory the node can still give without swapping (psutil)."""
    import psutil

    return int(psutil.virtual_memory().available)


def candidate_space(
    batch: int,
    cores: int,
    *,
    tune_batch: bool = False,
    storage: bool = True,
    features: bool = False,
) -> list[Candidate]:
    """The kinds of loader worth trying, each at its default prefetch depth, cheapest first.

    Parameters
    ----------
    batch : int
        The spec's per-worker batch.
    cores : int
        CPU cores the loader may use: loader workers go up to ``cores - 1`` (one is the
        training step's), at most 4; with two or more, a loader thread is tried too, after
        inline loading and before loader processes (no process, no batch copied across).
    tune_batch : bool
        Also try half and twice ``batch`` (the spec's opt-in).
    storage : bool
        Also try reading from storage every epoch instead of caching in memory.
    features : bool
        Also try (first) caching the deterministic preprocessing's output, so that epochs
        after the first run only the augmentation (the job has window preprocessing).
    """
    batches = [batch] + ([b for b in (batch // 2, batch * 2) if b >= 1] if tune_batch else [])
    workers = [n for n in (1, 2, 4) if n <= max(0, cores - 1)]
    caches: list[Cache] = ["features"] if features else []
    caches += ["memory", "storage"] if storage else ["memory"]
    kinds = []
    for b in batches:
        for cache in caches:
            kinds.append(Candidate(1, 0, b, cache))  # inline prefetches nothing
            if cores >= 2:
                kinds.append(Candidate(DEFAULT_PREFETCH, 0, b, cache, thread=True))
            kinds += [Candidate(DEFAULT_PREFETCH, n, b, cache) for n in workers]
    return kinds


def predicted_rate(
    c: Candidate, loader_rate: float, compute_s_per_window: float, free_cpus: float | None = None
) -> float:
    """Training samples per second under ``c``, from its loader's rate alone and the step's.

    Inline loading (no loader workers) runs between steps, so a batch costs its loading plus
    its compute; loader workers (or a loader thread, counted as one worker) load while the
    step computes, so a batch costs the slower of the two (DS-Analyzer's overlap model; the
    profiler predicts remedies the same way) when the node has a CPU free for each of them
    besides the step's. ``free_cpus`` is the CPU capacity other processes leave (``None``:
    all the workers need): with less, the share of the workers without a CPU of their own
    time-shares with the step and their overlap shrinks in proportion (none with one free
    CPU: the sum, as inline).
    ``compute_s_per_window`` is the training step's seconds per window (0: loader alone).
    """
    if loader_rate <= 0:
        return 0.0
    load, compute = 1.0 / loader_rate, compute_s_per_window
    loaders = c.workers or (1 if c.thread else 0)
    if not loaders:
        return 1.0 / (load + compute)
    spare = 1.0 if free_cpus is None else min(1.0, max(0.0, (free_cpus - 1.0) / loaders))
    return 1.0 / (max(load, compute) + (1.0 - spare) * min(load, compute))


def prefetch_variants(c: Candidate) -> list[Candidate]:
    """``c`` at the other prefetch depths (none for inline loading, which has no queue)."""
    if not c.workers and not c.thread:
        return []
    return [
        Candidate(d, c.workers, c.batch, c.cache, c.thread)
        for d in PREFETCH_DEPTHS
        if d != c.prefetch
    ]


def amortized_rate(cached_rate: float, first_s_per_window: float, epochs: int) -> float:
    """Loader samples per second over ``epochs`` epochs of a cache built in the first.

    ``cached_rate`` is the loader's rate reading the cache (later epochs);
    ``first_s_per_window`` the extra seconds per window of computing it once, spread over
    the epochs: the rate a ``features`` candidate is ranked by.
    """
    if cached_rate <= 0:
        return 0.0
    return 1.0 / (1.0 / cached_rate + first_s_per_window / max(1, epochs))


def search(
    candidates: Sequence[Candidate],
    time_fn: Callable[[Candidate], float],
    *,
    budget_bytes: int,
    footprint: Callable[[Candidate], int],
    available: Callable[[], int] = available_memory,
    time_budget_s: float = 5.0,
    clock: Callable[[], float] = time.perf_counter,
    reserve_bytes: int = RESERVE_BYTES,
    predict: Callable[[Candidate, float], float] = lambda c, rate: rate,
    loader_alone: bool = True,
) -> TuneResult:
    """Time each candidate that fits in memory until the time budget is spent; pick the fastest.

    Parameters
    ----------
    candidates : sequence of Candidate
        In the order to try them; the first is the fallback when none can be timed.
    time_fn : callable
        Samples per second of the loader alone under one candidate.
    predict : callable
        The training throughput a candidate's loader rate gives (:func:`predicted_rate`);
        by default the loader rate itself.
    budget_bytes : int
        The most a candidate may hold (:func:`memory_budget`).
    footprint : callable
        Bytes a candidate would hold (usually :meth:`Candidate.footprint`).
    available : callable
        Memory free now, read before each trial: a candidate that would leave less than
        ``reserve_bytes`` free is skipped (backed off) even within the budget.
    time_budget_s : float
        Wall time for all trials; a trial under way finishes, the rest are not tried.
    clock : callable
        Seconds, for the time budget (a fake in tests).
    loader_alone : bool
        Whether ``time_fn`` times the loader alone (recorded as each trial's
        ``loader_samples_per_s``) or the loader with the training step, end to end.

    Raises
    ------
    ValueError
        If there are no candidates.
    """
    if not candidates:
        raise ValueError("no loader candidates to search")
    start = clock()
    trials: list[Trial] = []
    for c in candidates:
        need = footprint(c)
        if clock() - start >= time_budget_s:
            trials.append(
                Trial(c, skipped=f"not tried: the {time_budget_s:.1f} s budget was spent")
            )
        elif need > budget_bytes:
            trials.append(
                Trial(c, skipped=f"needs {_mib(need)}, over the {_mib(budget_bytes)} budget")
            )
        elif (free := available()) - need < reserve_bytes:
            trials.append(Trial(c, skipped=f"needs {_mib(need)}, {_mib(free)} free: backed off"))
        else:
            t0 = clock()
            rate = time_fn(c)
            alone = rate if loader_alone else None
            trials.append(Trial(c, predict(c, rate), clock() - t0, loader_samples_per_s=alone))
    best = _cheapest_fast(trials)
    notes = () if best else ("no candidate could be timed: the first is kept",)
    chosen = best.candidate if best else candidates[0]
    return TuneResult(chosen, tuple(trials), budget_bytes, clock() - start, notes)


def _cheapest_fast(trials: Sequence[Trial]) -> Trial | None:
    """The first trial within :data:`TIE` of the fastest (trials run cheapest first)."""
    timed = [t for t in trials if t.samples_per_s is not None]
    if not timed:
        return None
    fastest = max(t.samples_per_s or 0.0 for t in timed)
    return next(t for t in timed if (t.samples_per_s or 0.0) >= (1 - TIE) * fastest)


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def two_phase_search(
    kinds: Sequence[Candidate],
    time_fn: Callable[[Candidate], float],
    *,
    time_budget_s: float,
    clock: Callable[[], float] = time.perf_counter,
    **limits: Any,
) -> TuneResult:
    """:func:`search` over ``kinds`` for :data:`FIRST_PHASE` of the time budget, then over
    the fastest kind's other prefetch depths (:func:`prefetch_variants`) for the rest.

    ``limits`` are :func:`search`'s memory arguments (``budget_bytes``, ``footprint``,
    ``available``, ``reserve_bytes``), applied in both phases.

    Raises
    ------
    ValueError
        If there are no candidates.
    """
    start = clock()
    first = search(kinds, time_fn, time_budget_s=time_budget_s * FIRST_PHASE, clock=clock, **limits)
    variants = prefetch_variants(first.chosen) if not first.notes else []
    left = time_budget_s - (clock() - start)
    if not variants or left <= 0:
        return first
    second = search(variants, time_fn, time_budget_s=left, clock=clock, **limits)
    trials = first.trials + second.trials
    best = _cheapest_fast(trials) or first.trials[0]
    return TuneResult(best.candidate, trials, first.budget_bytes, clock() - start)
