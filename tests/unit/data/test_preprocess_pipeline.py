"""Preprocessing as the data stage runs it: spec checks, fitting on train, placement."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from engage.data import prepare
from engage.data.preprocess import (
    build_operators,
    fit_preprocess,
    guard,
    preprocess_problems,
    resolve_device,
)
from engage.errors import SpecError
from engage.spec import parse_spec
from tests.unit.data._builders import synthetic_spec
from tests.unit.data._preprocess import windows

SMALL = {"type": "synthetic", "households": 1, "days": 3}
STEPS = [
    {"op": "clip", "params": {"quantile": 0.01}},
    {"op": "rolling", "params": {"size": 4, "stats": ["mean", "std"]}},
    {"op": "spectral", "params": {"bins": 6}},
    {"op": "jitter", "params": {"std": 0.05, "seed": 1}},
]

SPEC = """\
name: p
data:
  source: {type: synthetic}
  features: [temperature, co2]
  target: occupied
  task: classification
  preprocess:
    - op: clip
      params: {low: 1.0, high: 0.0}
    - op: jitter
      params: {std: -1}
model: {name: mlp}
"""


def test_no_preprocessing_leaves_the_prepared_data_as_it_was() -> None:
    data = prepare(synthetic_spec(source=SMALL), ".")

    assert data.preprocess is None
    assert data.inputs is None
    assert data.model_inputs("train") is data.train.x


def test_window_operators_give_model_inputs_and_keep_the_raw_windows() -> None:
    plain = prepare(synthetic_spec(source=SMALL), ".")
    data = prepare(synthetic_spec(source=SMALL, preprocess=STEPS), ".")

    assert np.array_equal(data.test.x, plain.test.x)
    for name in ("train", "val", "test"):
        assert data.model_inputs(name).shape == (len(getattr(data, name)), 30 + 6, 15)
    served, _ = data.preprocess.transform(data.test.x, train=False)
    assert np.array_equal(served, data.model_inputs("test"))


def test_fitted_state_comes_from_the_training_split_only() -> None:
    data = prepare(synthetic_spec(source=SMALL, preprocess=STEPS[:1]), ".")
    rows = data.train.x.reshape(-1, 5).astype(np.float64)

    state = data.preprocess.steps[0].state

    np.testing.assert_allclose(state["low"].numpy(), np.quantile(rows, 0.01, axis=0), rtol=1e-5)
    np.testing.assert_allclose(state["high"].numpy(), np.quantile(rows, 0.99, axis=0), rtol=1e-5)


def test_spec_check_locates_each_bad_parameter_in_the_file() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(SPEC, origin="p.yaml")

    text = str(caught.value)
    assert "p.yaml:9: data.preprocess.0.params" in text
    assert "low (1.0) must be below high (0.0)" in text
    assert "p.yaml:11: data.preprocess.1.params.std" in text


def test_unknown_operator_and_late_row_operator_are_problems() -> None:
    spec = synthetic_spec(
        preprocess=[
            {"op": "clip", "params": {"low": 0}},
            {"op": "resample", "params": {"every": "5min"}},
            {"op": "fft"},
        ]
    )

    problems = {".".join(map(str, p.path)): p.text for p in preprocess_problems(spec)}

    assert "must come before window operators" in problems["data.preprocess.1.op"]
    assert "expected one of: clip, jitter, lag" in problems["data.preprocess.2.op"]
    with pytest.raises(SpecError, match=r"data\.preprocess\[1\]\.op"):
        build_operators(spec.preprocess[:2])


def test_gpu_without_cuda_is_a_spec_error_and_auto_is_the_cpu() -> None:
    assert resolve_device("auto", cuda_available=False).type == "cpu"
    assert resolve_device("cpu", cuda_available=True).type == "cpu"
    assert resolve_device("auto", cuda_available=True).type == "cuda"
    with pytest.raises(SpecError, match=r"data\.preprocess_device: got 'gpu'"):
        resolve_device("gpu", cuda_available=False)


def test_memory_guard_falls_back_to_the_cpu_and_says_so(monkeypatch) -> None:
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * gib, 8 * gib))
    cuda = torch.device("cuda")

    roomy = guard(cuda, 2**20)
    tight = guard(cuda, 2**28)  # 8 x 256 MiB + 20% of 8 GiB > 3 GiB free

    assert roomy.device == cuda
    assert roomy.note is None
    assert tight.device.type == "cpu"
    assert "fell back to the CPU" in tight.note
    assert "3072 MiB free" in tight.note


def test_every_chunk_runs_on_the_cpu_when_the_gpu_is_full(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (0, 8 * 2**30))
    ops = build_operators(synthetic_spec(preprocess=STEPS[:2]).preprocess)
    fitted = fit_preprocess(ops, windows(), torch.device("cuda"))

    out, notes = fitted.transform(windows(seed=5), train=False, device=torch.device("cuda"))

    assert fitted.notes
    assert "fell back to the CPU" in notes[0]
    assert out.shape == (6, 12, 9)


def test_prepare_refuses_gpu_preprocessing_without_a_gpu_before_reading(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = synthetic_spec(source=SMALL, preprocess=STEPS[:1], preprocess_device="gpu")
    stage = sys.modules["engage.data.prepare"]  # the module; engage.data.prepare is the function
    monkeypatch.setattr(stage, "load_frame", lambda *a: pytest.fail("data was read"))

    with pytest.raises(SpecError, match="no CUDA GPU"):
        prepare(spec, ".")
