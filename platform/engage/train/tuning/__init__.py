"""Tuning on Ray Tune: the ``tuning`` job kind, its search space and its trials.

A spec with a ``tune`` section runs as :class:`~engage.train.tuning.job.TuningJob`
(registered when :mod:`engage.runtime.kinds` imports ``engage.train.tuning.job``).
Importing this package imports neither Ray nor torch.
"""

from engage.train.tuning.search import objective, trial_overrides, trial_spec

__all__ = ["objective", "trial_overrides", "trial_spec"]
