"""``data.preprocess`` on a streamed training split, without Ray: the streamed batches, the
fitted state and the val/test inputs equal the in-memory path's; what cannot stream is
refused at its spec field."""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from engage.data import prepare
from engage.data.batch_order import epoch_order, shuffled_batches
from engage.data.preprocess import (
    build_operators,
    fit_in_parts,
    fit_preprocess,
    preprocess_problems,
)
from engage.data.preprocess import fitted as fitted_module
from engage.data.stream_plan import should_stream
from engage.data.streaming import epoch_blocks
from engage.errors import SpecError
from engage.spec.models import PreprocessStep
from tests.unit.data._builders import clean_table, file_spec
from tests.unit.data._preprocess import DEVICES, windows

GROUPS = tuple("abcdef")

STEPS = [
    {"op": "resample", "params": {"every": "2min"}},  # moves the last time, so the cuts
    {"op": "clip", "params": {"low": -1.5, "high": 1.5}},
    {"op": "rolling", "params": {"size": 3, "stats": ["mean", "std"]}},
    {"op": "jitter", "params": {"std": 0.1, "seed": 4}},
    {"op": "spectral", "params": {"bins": 3}},  # standardised with streamed statistics
    {"op": "scale", "params": {"std": 0.2, "seed": 5}},
]


def _shards(folder: Path) -> None:
    """Two whole groups per shard, group "a" split over two shards, a few rows missing."""
    table = clean_table(rows_per_group=80, groups=GROUPS)
    table = table.drop(index=[7, 8, 95, 300]).reset_index(drop=True)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(0, len(GROUPS), 2):
        part = table[table.site.isin(GROUPS[i : i + 2])]
        if i == 0:
            part.iloc[:40].to_parquet(folder / "part-00a.parquet", index=False)
            part = part.iloc[40:]
        part.to_parquet(folder / f"part-{i:02d}.parquet", index=False)


def _stream_blocks(stream) -> list[dict[str, torch.Tensor]]:
    """The training blocks as the Ray Data readers yield them, unit by unit, as tensors."""
    return [
        {key: torch.from_numpy(value) for key, value in block.items()}
        for unit in range(len(stream.plan.units))
        for block in stream.blocks(unit)
    ]


def _epoch_batches(stream, epoch: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The batches a streamed worker trains on in ``epoch``: the readers' blocks with the
    epoch's augmentation (as the loop runs it on arrival), in the seeded order."""
    blocks = epoch_blocks(_stream_blocks(stream), stream.augment, epoch, stream.n_train)
    return list(
        shuffled_batches(blocks, seed=3, epoch=epoch, buffer=64, batch=batch, limit=stream.n_train)
    )


def test_both_paths_give_the_same_preprocessed_batches_for_a_seed(both) -> None:
    memory, streamed = both
    y = torch.from_numpy(memory.train.y)
    n, batch = len(y), 16
    assert streamed.train_windows == n > 3 * fitted_module.CHUNK
    assert any(at % fitted_module.CHUNK for at in streamed.stream.offsets)  # a unit mid-chunk

    got = {}
    for epoch in (1, 2):
        # The in-memory model inputs of this epoch: every step, with the epoch's draws.
        x, _ = memory.preprocess.transform(memory.train.x, train=True, epoch=epoch)
        x = torch.from_numpy(x)
        order = epoch_order(n, seed=3, epoch=epoch, buffer=64)
        expected = [(x[order[i : i + batch]], y[order[i : i + batch]]) for i in range(0, n, batch)]
        got[epoch] = _epoch_batches(streamed.stream, epoch, batch)

        assert len(got[epoch]) == len(expected)
        for (gx, gy), (ex, ey) in zip(got[epoch], expected, strict=True):
            torch.testing.assert_close(gx, ex, rtol=0, atol=1e-5)
            assert torch.equal(gy, ey)
        if epoch == 1:  # epoch 1 is what the data stage's model inputs hold
            np.testing.assert_array_equal(x.numpy(), memory.model_inputs("train"))

    # Epoch 2 draws new noise: each window, back in canonical order, differs from epoch 1's.
    first = torch.cat([b[0] for b in got[1]])[epoch_order(n, 3, 1, 64).argsort()]
    second = torch.cat([b[0] for b in got[2]])[epoch_order(n, 3, 2, 64).argsort()]
    assert first.shape == second.shape
    assert (first - second).abs().mean() > 0.01


def test_a_stream_without_augmentation_is_preprocessed_whole_by_its_readers(tmp_path) -> None:
    _shards(tmp_path / "s")
    steps = [s for s in STEPS if s["op"] not in ("jitter", "scale")]
    memory = prepare(file_spec("s", "parquet", streaming=False, preprocess=steps), tmp_path)
    streamed = prepare(file_spec("s", "parquet", streaming=True, preprocess=steps), tmp_path)

    assert streamed.stream.augment is None
    x = np.concatenate([b["x"].numpy() for b in _stream_blocks(streamed.stream)])
    np.testing.assert_allclose(x, memory.model_inputs("train"), rtol=0, atol=1e-5)


def test_the_stream_travels_to_ray_tasks_with_its_preprocessing(both) -> None:
    _, streamed = both

    copy = pickle.loads(pickle.dumps(streamed.stream))

    assert copy.augment is not None
    for a, b in zip(_stream_blocks(copy), _stream_blocks(streamed.stream), strict=True):
        assert a.keys() == b.keys() == {"x", "y", "i"}
        for key in a:
            assert torch.equal(a[key], b[key])


def test_val_and_test_inputs_and_the_fitted_state_equal_the_in_memory_ones(both) -> None:
    memory, streamed = both

    np.testing.assert_allclose(streamed.normalization.mean, memory.normalization.mean, rtol=1e-6)
    np.testing.assert_allclose(streamed.normalization.std, memory.normalization.std, rtol=1e-6)
    for name in ("val", "test"):
        got, want = getattr(streamed, name), getattr(memory, name)
        np.testing.assert_allclose(
            streamed.model_inputs(name), memory.model_inputs(name), atol=1e-5
        )
        np.testing.assert_array_equal(got.y, want.y)
        np.testing.assert_array_equal(got.times, want.times)
    assert streamed.model_inputs("train").shape[1:] == memory.model_inputs("train").shape[1:]
    spectral = next(s for s in streamed.preprocess.steps if s.op.name == "spectral")
    expected = next(s for s in memory.preprocess.steps if s.op.name == "spectral")
    for key in ("mean", "std"):
        torch.testing.assert_close(spectral.state[key], expected.state[key], rtol=1e-5, atol=1e-6)


def test_augmentation_of_a_split_in_pieces_equals_the_whole(monkeypatch) -> None:
    monkeypatch.setattr(fitted_module, "CHUNK", 8)
    steps = [PreprocessStep(op="jitter", params={"std": 0.3}), PreprocessStep(op="scale",
             params={"std": 0.2, "seed": 1})]  # fmt: skip
    fitted = fit_preprocess(build_operators(steps), windows())
    x = windows(n=30, seed=2)

    whole, _ = fitted.transform(x, train=True)
    cuts = [0, 5, 8, 19, 27, 30]
    pieces = [
        fitted.transform(x[a:b], train=True, start=a, total=len(x))[0]
        for a, b in itertools.pairwise(cuts)
    ]

    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    noise, _ = fitted.transform(np.zeros_like(x), train=True)
    assert not np.allclose(noise[:8], noise[8:16])  # each chunk draws its own noise


@pytest.mark.parametrize("device", DEVICES)
def test_a_fit_in_parts_equals_the_fit_on_the_whole_split(device: str) -> None:
    steps = [
        PreprocessStep(op="lag", params={"lags": [2]}),
        PreprocessStep(op="jitter", params={"std": 0.5}),  # skipped by the fits after it
        PreprocessStep(op="spectral", params={"bins": 4}),
        PreprocessStep(op="spectral", params={"bins": 2, "log": False}),  # fitted on the first
    ]
    x = windows(n=50, seed=3)
    parts = [x[:1], x[1:20], x[20:21], x[21:]]

    whole = fit_preprocess(build_operators(steps), x, torch.device(device))
    streamed = fit_in_parts(build_operators(steps), lambda: iter(parts), torch.device(device))

    for got, want in zip(streamed.steps, whole.steps, strict=True):
        assert got.state.keys() == want.state.keys()
        for key in want.state:
            torch.testing.assert_close(got.state[key], want.state[key], rtol=1e-5, atol=1e-6)
    assert streamed.steps[2].state
    assert streamed.steps[3].state


def test_clip_by_quantile_is_refused_at_its_field_on_a_stream(tmp_path: Path) -> None:
    _shards(tmp_path / "s")
    steps = [{"op": "rolling", "params": {"size": 2}}, {"op": "clip", "params": {"quantile": 0.01}}]
    spec = file_spec("s", "parquet", streaming=True, preprocess=steps)

    problems = {".".join(map(str, p.path)): p.text for p in preprocess_problems(spec)}

    assert "every training window in memory" in problems["data.preprocess.1.params.quantile"]
    with pytest.raises(SpecError, match=r"data\.preprocess\[1\]\.params\.quantile: .*clip"):
        prepare(spec, tmp_path)
    assert not preprocess_problems(file_spec("s", "parquet", streaming=False, preprocess=steps))


def test_auto_streams_preprocessing_unless_an_operator_cannot(tmp_path: Path) -> None:
    _shards(tmp_path / "s")
    quantile = [{"op": "clip", "params": {"quantile": 0.01}}]

    big = {"streaming_threshold_mb": 1e-4}
    assert should_stream(file_spec("s", "parquet", preprocess=STEPS, **big), tmp_path)
    assert not should_stream(file_spec("s", "parquet", preprocess=quantile, **big), tmp_path)
