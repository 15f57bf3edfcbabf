"""A federated client pays its one-off costs when it starts, not in its first round.

A Ray client pool waits for its actors to start outside any round's timeout
(``RayPool._await_start``), so what a client's first ``fit`` still has to load counts
against round 1's timeout instead: on two loaded cores the first optimizer a process
builds imported ``torch._dynamo`` for 3-4 s, and an honest client became a straggler of
a round with a short timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_FIRST_FIT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from engage.federated import wire
    from engage.federated.client import FederatedClient, LocalTraining, build_model, get_vector
    from engage.train.builders import ModelShape

    training = LocalTraining(
        model_name="mlp", model_params={"hidden": 8, "layers": 1},
        shape=ModelShape(window=4, features=3, outputs=2), task="classification",
        local_epochs=1, batch_size=8, optimizer="adam", learning_rate=0.01,
        strategy="fedavg", mu=0.0, seed=0, max_update_bytes=1 << 20,
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4, 3)).astype(np.float32)
    y = (x[:, 0, 0] > 0).astype(np.int64)
    client = FederatedClient("c0", training, x, y, "hmac-sha256", b"k" * 32)
    start = get_vector(build_model(training), client.schema)
    message = wire.encode_global(1, start, client.schema)
    before = set(sys.modules)
    client.fit(message)
    print(json.dumps(sorted(set(sys.modules) - before)))
    """
)


def test_a_clients_first_fit_imports_nothing_its_start_did_not() -> None:
    # A fresh interpreter: this process has long imported whatever a fit could need.
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_FIT], capture_output=True, text=True, timeout=300
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
