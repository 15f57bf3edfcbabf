"""Driver side of a search: Ray Tune's Tuner in a thread, the trials' events pumped here.

:func:`run_search` builds the Tuner from the spec's ``tune`` section (search space,
searcher, ASHA or no scheduler, concurrency, CPUs per trial), runs it in a background
thread while this thread drains the trials' events into the :class:`TrialBook` (as
:func:`engage.train.trainer.fit` does for Ray Train workers), and returns the best
finished trial. A Ctrl-C reaches this thread as usual; the job then ends ``KILLED``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.errors import SpecError, TrainingError
from engage.events import HUB_POLL_S, EventPump, FanOut, start_hub
from engage.spec import LoadedSpec
from engage.spec.models import TuneSpec
from engage.train.tuning.search import max_epochs, touches_data, tune_space
from engage.train.tuning.trial import TrialData, TrialSetup, run_trial
from engage.train.tuning.trials import TrialBook, TrialRecord

_OUTPUT_ENV = "RAY_AIR_NEW_OUTPUT"
_FINAL_DRAIN_S = 60.0  # how long the end of a search waits for the trials' last events


@dataclass(frozen=True)
class SearchOutcome:
    """What a search found: the best finished trial and how long the search took."""

    best: TrialRecord
    seconds: float


def searcher(tune: TuneSpec, metric: str, mode: str) -> Any:
    """The search algorithm ``tune.searcher`` names, limited to ``tune.max_concurrent``.

    Raises
    ------
    SpecError
        ``tpe`` without Optuna installed.
    """
    from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter

    if tune.searcher == "random":
        return BasicVariantGenerator(random_state=tune.seed, max_concurrent=tune.max_concurrent)
    try:
        from ray.tune.search.optuna import OptunaSearch

        algo = OptunaSearch(metric=metric, mode=mode, seed=tune.seed)
    except (ImportError, AssertionError):
        raise SpecError(
            "tune.searcher tpe needs Optuna, which is not installed",
            hint="pip install optuna (it is pinned in constraints.txt), or use searcher: random",
        ) from None
    return ConcurrencyLimiter(algo, max_concurrent=tune.max_concurrent)


def scheduler(tune: TuneSpec, max_t: int) -> Any:
    """ASHA over training epochs, or None (every trial trains fully)."""
    if tune.scheduler == "none":
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(
        time_attr="training_iteration",
        max_t=max_t,
        grace_period=min(tune.grace_period, max_t),
        reduction_factor=tune.reduction_factor,
    )


def run_search(
    loaded: LoadedSpec,
    data: TrialData,
    book: TrialBook,
    *,
    storage: Path,
    name: str,
) -> SearchOutcome:
    """Run every trial of ``loaded.spec.tune``; the trials' events reach ``book``.

    Parameters
    ----------
    data:
        The shared training arrays, model shape and per-epoch augmentation (a space over
        ``data.*`` makes each trial prepare its own instead).
    storage, name:
        Where Tune keeps its trial folders.

    Raises
    ------
    TrainingError
        No trial finished (the message gives the first trial's error).
    """
    spec = loaded.spec.tune
    assert spec is not None  # only the tuning kind calls this
    hub = start_hub()
    setup = TrialSetup.of(loaded, hub, book.parent.local_id, spec.cpus_per_trial)
    shared = None if touches_data(spec.space) else data
    started = time.perf_counter()
    with _quiet_tune():
        tuner = _tuner(loaded, spec, setup, shared, book, storage / name)
        _fit(tuner, EventPump(hub, FanOut([book])), book)
    best = book.best()
    if best is None:
        first = next((r.error for r in book.records.values() if r.error), "no trial reported")
        raise TrainingError(
            f"no tuning trial finished with a finite {book.metric}: {first}",
            hint="widen or move tune.space, or check the spec with `engage validate`",
        )
    return SearchOutcome(best, time.perf_counter() - started)


def _tuner(
    loaded: LoadedSpec, spec: TuneSpec, setup: TrialSetup, shared: Any, book: TrialBook, path: Path
) -> Any:
    """The Tuner of the spec's search: trainable, space, searcher, scheduler, callback."""
    from ray import tune as rt

    from engage.train.tuning.callback import BookCallback

    trainable = rt.with_resources(
        rt.with_parameters(run_trial, setup=setup, data=shared), {"cpu": spec.cpus_per_trial}
    )
    return rt.Tuner(
        trainable,
        param_space=tune_space(spec),
        tune_config=rt.TuneConfig(
            metric=book.metric,
            mode=book.mode,
            num_samples=spec.num_samples,
            search_alg=searcher(spec, book.metric, book.mode),
            scheduler=scheduler(spec, max_epochs(loaded)),
        ),
        run_config=rt.RunConfig(
            name=path.name,
            storage_path=str(path.parent),
            verbose=0,
            callbacks=[BookCallback(book)],
        ),
    )


@contextmanager
def _quiet_tune() -> Iterator[None]:
    """Tune's own console tables off: the job's display shows the trials.

    ``RunConfig(verbose=0)`` still prints the experiment's header with Tune's newer output;
    its older one prints nothing at verbosity 0. The setting is process-wide: it is
    restored when the search ends.
    """
    previous = os.environ.get(_OUTPUT_ENV)
    os.environ[_OUTPUT_ENV] = "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_OUTPUT_ENV, None)
        else:
            os.environ[_OUTPUT_ENV] = previous


def _fit(tuner: Any, pump: EventPump, book: TrialBook) -> None:
    """``tuner.fit()`` in a thread while this one pumps events; re-raise what it raised."""
    box: dict[str, Any] = {}

    def _run() -> None:
        try:
            box["result"] = tuner.fit()
        except BaseException as exc:  # re-raised on the driver thread below
            box["error"] = exc

    thread = threading.Thread(target=_run, name="engage-tune", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(HUB_POLL_S)  # the durability contract's hub poll
            pump.poll()
        pump.finish(_FINAL_DRAIN_S)
    finally:
        book.close("KILLED" if thread.is_alive() else "FAILED")
    if "error" in box:
        raise TrainingError(f"the tuning search failed: {box['error']}") from box["error"]
