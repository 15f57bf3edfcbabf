"""Labelled events of the simulation: occupancy, head count, activity and sensor fault.

Labels are written beside the sensors so a spec can choose any of them as its target
(``occupied`` as in :mod:`engage.data.synthetic`, ``activity`` for activity recognition,
``fault`` for fault detection).
"""

from __future__ import annotations

import numpy as np

from engage.data.simulator.faults import FAULTS
from engage.data.simulator.routines import ACTIVITIES, Routine

LABELS = ("occupied", "occupants", "activity", "fault")
"""Label columns, after the sensor columns."""

__all__ = ["ACTIVITIES", "FAULTS", "LABELS", "labels"]


def labels(rt: Routine, fault: np.ndarray) -> dict[str, np.ndarray]:
    """The label columns, each of shape (H, D * 1440).

    Parameters
    ----------
    rt : Routine
        The occupants' state per minute.
    fault : numpy.ndarray
        The fault code per minute from :func:`engage.data.simulator.faults.inject`.

    Returns
    -------
    dict[str, numpy.ndarray]
        ``occupied`` (int64 0/1: any resident home), ``occupants`` (int8: residents and
        guests at home), ``activity`` (int8 code into :data:`ACTIVITIES`), ``fault``
        (int8 code into :data:`FAULTS`).
    """
    h = rt.home.shape[0]
    return {
        "occupied": rt.home.reshape(h, -1).astype(np.int64),
        "occupants": rt.occupants.reshape(h, -1).astype(np.int8),
        "activity": rt.activity().reshape(h, -1),
        "fault": fault,
    }
