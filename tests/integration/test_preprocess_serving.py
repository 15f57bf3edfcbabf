"""The logged model carries its fitted preprocessing: pyfunc on raw windows = training path.

System lane (no Ray): saving a ``pt2`` model runs ``torch.export``, which takes seconds.
"""

from __future__ import annotations

import numpy as np
import torch

from engage.data import prepare
from engage.train.models import Standardized
from tests.unit.data._builders import synthetic_spec

STEPS = [
    {"op": "clip", "params": {"quantile": 0.01}},
    {"op": "rolling", "params": {"size": 5, "stats": ["mean", "std", "max"]}},
    {"op": "lag", "params": {"lags": [1, 3]}},
    {"op": "spectral", "params": {"bins": 8}},
    {"op": "jitter", "params": {"std": 0.05}},
    {"op": "scale", "params": {"std": 0.1}},
]


def test_pyfunc_prediction_on_raw_windows_equals_the_training_path(tmp_path) -> None:
    import mlflow.pyfunc
    import mlflow.pytorch
    from mlflow.models import infer_signature

    data = prepare(
        synthetic_spec(source={"type": "synthetic", "households": 1, "days": 2}, preprocess=STEPS),
        ".",
    )
    window, features = data.model_inputs("train").shape[1:]
    torch.manual_seed(0)
    core = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(window * features, 2)).eval()
    norm = data.normalization
    model = Standardized(
        data.preprocess.wrap(core), torch.from_numpy(norm.mean), torch.from_numpy(norm.std)
    )
    raw = (data.test.x * norm.std + norm.mean).astype(np.float32)  # what a caller sends
    with torch.no_grad():
        trained_on = core(torch.from_numpy(data.model_inputs("test"))).numpy()
        example = model.eval()(torch.from_numpy(raw[:5])).numpy()

    # The same arguments as engage.tracking.run.PipelineRun.log_model.
    mlflow.pytorch.save_model(
        model,
        tmp_path / "model",
        signature=infer_signature(raw[:5], example),
        input_example=raw[:5],
        serialization_format="pt2",
        pip_requirements=["torch"],
    )
    served = np.asarray(mlflow.pyfunc.load_model(str(tmp_path / "model")).predict(raw))

    np.testing.assert_allclose(served, trained_on, rtol=1e-5, atol=1e-5)
