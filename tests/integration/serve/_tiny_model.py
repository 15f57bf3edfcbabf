"""Two tiny registered versions of a classifier, for the serving integration tests.

They stand in for trained models (same signature as engage's): version 1 is
``@candidate``, version 2 ``@champion``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

MODEL = "tiny-occupancy"
WINDOW, FEATURES = 4, 3
FEATURE_NAMES = ("temperature", "co2", "motion")  # the model card's, in input order


def register_versions(home: Path) -> None:
    """Two versions of a tiny torch.export classifier, candidate -> 1, champion -> 2."""
    import mlflow.pytorch
    import torch
    from mlflow.models import infer_signature

    from engage.tracking.run import model_requirements
    from engage.tracking.store import ensure_experiment, open_client

    client = open_client(f"sqlite:///{home / 'mlflow.db'}")
    experiment = ensure_experiment(client, "serve-test")
    for version, bias in (("1", -1.0), ("2", 1.0)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(WINDOW * FEATURES, 2))
        with torch.no_grad():
            model[1].bias.copy_(torch.tensor([bias, -bias]))
        x = np.random.default_rng(0).normal(size=(5, WINDOW, FEATURES)).astype(np.float32)
        y = model(torch.from_numpy(x)).detach().numpy()
        path = home / f"model-{version}"
        mlflow.pytorch.save_model(
            model,
            path,
            signature=infer_signature(x, y),
            input_example=x,
            serialization_format="pt2",
            pip_requirements=model_requirements(),  # as engage logs its own models
        )
        run = client.create_run(experiment)
        client.log_artifacts(run.info.run_id, str(path), "model")
        card = {
            "task": "classification",
            "classes": ["away", "home"],
            "window": WINDOW,
            "features": list(FEATURE_NAMES),
        }
        client.log_text(run.info.run_id, json.dumps(card), "model_card/inputs.json")
        client.create_registered_model(MODEL) if version == "1" else None
        client.create_model_version(MODEL, f"{run.info.artifact_uri}/model", run_id=run.info.run_id)
    client.set_registered_model_alias(MODEL, "candidate", "1")
    client.set_registered_model_alias(MODEL, "champion", "2")
