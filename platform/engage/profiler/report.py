"""One profile of a job: measure its stages, classify it, predict remedies, save the result.

:func:`profile_job` is what ``engage profile`` runs; the result carries the stage times,
the verdict and the remedies, and :meth:`ProfileReport.save` writes ``profile.json`` and
``profile.svg``.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.profiler.measure import measure
from engage.profiler.plot import render_svg
from engage.profiler.verdict import Remedy, StageTimes, classify, remedies
from engage.spec.models import PipelineSpec

ADVICE = {
    "storage-bound": "reading storage is the slowest stage: cache the decoded windows or use faster storage",
    "preprocessing-bound": "preprocessing is the slowest stage: add CPU loader workers or preprocess on the GPU",
    "compute-bound": "the model is the slowest stage: the input pipeline keeps up; a larger batch may help",
}


@dataclass(frozen=True)
class ProfileReport:
    """The profile of one job.

    Attributes
    ----------
    name : str
        The spec's name.
    times : StageTimes
        Each stage alone, per step.
    verdict : str
        ``storage-bound``, ``preprocessing-bound`` or ``compute-bound``.
    remedies : list of Remedy
        Best predicted speedup first.
    """

    name: str
    times: StageTimes
    verdict: str
    remedies: list[Remedy]

    @property
    def advice(self) -> str:
        """The verdict's recommendation, in one sentence."""
        best = next((r for r in self.remedies if r.speedup), None)
        tail = f"; best predicted: {best.name} ({best.speedup:.2f}x)" if best else ""
        return ADVICE[self.verdict] + tail

    def as_dict(self) -> dict[str, Any]:
        """Plain values, for JSON."""
        return {
            "name": self.name,
            "verdict": self.verdict,
            "advice": self.advice,
            "times": self.times.as_dict(),
            "predicted_step": self.times.step,
            "predicted_stall_ratio": self.times.stall_ratio,
            "remedies": [
                {
                    "name": r.name,
                    "key": r.key,
                    "speedup": r.speedup,
                    "note": r.note,
                    "config": vars(r.config),
                }
                for r in self.remedies
            ],
        }

    def params(self) -> dict[str, Any]:
        """What the profile was measured with (the MLflow run's parameters)."""
        t = self.times
        return {
            "pipeline": self.name,
            "batch": t.batch,
            "cores": t.cores,
            "free_cpus": t.free_cpus,
            "bandwidth_bytes_per_s": t.bandwidth,
        }

    def metrics(self) -> dict[str, float]:
        """Each stage's measured throughput (samples/s), the predicted step and stall ratio,
        and each remedy's predicted speedup (``profile_speedup_<key>``), for MLflow."""
        t = self.times
        per_step = {
            "storage": (t.storage, t.batch),
            "cache": (t.cache, t.batch),
            "preprocess": (t.preprocess, t.batch),
            "preprocess_gpu": (t.preprocess_gpu, t.batch),
            "compute": (t.compute, t.batch),
            "compute_double_batch": (t.compute_large, 2 * t.batch),
        }
        out = {
            f"profile_{stage}_samples_per_s": samples / seconds
            for stage, (seconds, samples) in per_step.items()
            if seconds  # a stage that did not run (no preprocessing, no GPU) has no rate
        }
        out |= {"profile_step_seconds": t.step, "profile_stall_ratio": t.stall_ratio}
        out |= {f"profile_speedup_{r.key}": r.speedup for r in self.remedies if r.speedup}
        return out

    def save(self, folder: Path) -> tuple[Path, Path]:
        """Write ``profile.json`` and ``profile.svg`` under ``folder``; return their paths."""
        folder.mkdir(parents=True, exist_ok=True)
        js, svg = folder / "profile.json", folder / "profile.svg"
        js.write_text(json.dumps(self.as_dict(), indent=2) + "\n")
        svg.write_text(render_svg(self.times, self.remedies, self.verdict, self.name))
        return js, svg


def profile_job(
    spec: PipelineSpec,
    data: Any,
    bandwidth: float | None = None,
    steps: int = 10,
    batch: int | None = None,
) -> ProfileReport:
    """Measure, classify and predict for ``spec`` on its prepared ``data``.

    Parameters
    ----------
    spec : PipelineSpec
        The job.
    data : PreparedData
        What :func:`engage.data.prepare` made of ``spec.data``.
    bandwidth : float, optional
        Storage read rate in bytes/s to throttle to.
    steps : int
        Timed steps per measurement.
    batch : int, optional
        Windows per step; default the spec's per-worker batch.
    """
    with tempfile.TemporaryDirectory(prefix="engage-profile-") as tmp:
        times = measure(spec, data, Path(tmp), bandwidth=bandwidth, steps=steps, batch=batch)
    fixes = remedies(times, preprocess=data.preprocess is not None)
    return ProfileReport(spec.name, times, classify(times), fixes)
