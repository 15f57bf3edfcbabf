"""The Ray Tune callback that tells the driver's :class:`~engage.train.tuning.trials.TrialBook`
when a trial starts and ends (Tune calls it on the thread that runs the search).

An ASHA stop ends a trial like a completed one (``on_trial_complete``); the book tells
them apart by the epochs the trial reached. Importing this module imports Ray Tune.
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

from engage.train.tuning.trials import TrialBook


class BookCallback(Callback):
    """Forwards Tune's trial starts, completions and errors to ``book``."""

    def __init__(self, book: TrialBook) -> None:
        self.book: TrialBook | None = book

    def __getstate__(self) -> dict[str, Any]:
        """Tune pickles its callbacks into the experiment folder for a restore; the book
        (a live run, locks) stays with this process, so a restored callback has none."""
        return {"book": None}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial's actor started: open its child run and record."""
        if self.book is not None:
            self.book.started(trial.trial_id, trial.config)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial ended normally or was stopped by the scheduler."""
        if self.book is not None:
            self.book.ended(trial.trial_id, "FINISHED", trial.last_result)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial raised: its run ends FAILED with the error's last line."""
        if self.book is not None:
            self.book.ended(trial.trial_id, "FAILED", trial.last_result, _error_line(trial))


def _error_line(trial: Any) -> str:
    """The last non-empty line of the trial's error (engage errors put their message there)."""
    error = getattr(trial, "error_file", None)
    text = ""
    if error:
        try:
            with open(error, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            text = ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "the trial raised an error"
