"""The preprocessing keeps its scratch memory instead of faulting it in again every piece."""

from __future__ import annotations

import platform

import pytest

from engage.data.preprocess import build_operators, fit_preprocess, memory
from engage.spec.models import PreprocessStep
from tests.unit.data._preprocess import windows

STEPS = [
    PreprocessStep(op="clip", params={"quantile": 0.001}),
    PreprocessStep(op="rolling", params={"size": 15, "stats": ["mean", "std", "max"]}),
    PreprocessStep(op="lag", params={"lags": [1, 15]}),
    PreprocessStep(op="spectral", params={"bins": 16}),
]


def test_a_cpu_transform_keeps_its_scratch_memory(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(memory, "keep_scratch_memory", lambda: calls.append(1) or True)
    fitted = fit_preprocess(build_operators(STEPS), windows(n=64, window=24))

    fitted.transform(windows(n=8, window=24), train=False)

    assert calls


_BUILD = """
import resource, sys
import numpy as np
from engage.data.preprocess import build_operators, fit_preprocess
from engage.spec.models import PreprocessStep

steps = [PreprocessStep(op=op, params=params) for op, params in {steps!r}]
# A fresh process whose allocator has seen no large temporary yet (the windows drawn in
# float32 directly): glibc's adaptive thresholds then stay near the pieces' own sizes.
x = np.random.default_rng(0).standard_normal(size=(1024, 120, 5), dtype=np.float32)
fitted = fit_preprocess(build_operators(steps), x[:32])
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
out, _ = fitted.transform(x, train=False)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(faults, out.nbytes // 4096)
"""


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_pieces_reuse_their_scratch_memory_instead_of_faulting_it_in() -> None:
    import subprocess
    import sys

    steps = [(s.op, s.params) for s in STEPS]
    done = subprocess.run(
        [sys.executable, "-c", _BUILD.format(steps=steps)],
        capture_output=True,
        text=True,
        check=True,
    )
    faults, pages = map(int, done.stdout.split())

    # The result's own pages (32 MiB, 4 KiB each), and little more: each of the 32 pieces'
    # few megabytes of scratch faulted in again made it 48,000 (6x the result).
    assert faults < 1.5 * pages


def test_the_thresholds_are_set_once_per_process() -> None:
    first = memory.keep_scratch_memory()

    assert memory.keep_scratch_memory() is first
    assert first == (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc")
