"""Serving: a registered model over HTTP JSON with Ray Serve.

``deploy_model`` starts (or rolls) an app, ``serve_status`` and ``stop_serving`` inspect and
stop them. Requests are validated against the model's signature, authenticated with a
bearer token off loopback, batched, reported through the one report path, and sampled for
the drift detectors. Importing this package starts nothing and does not import Ray.
"""

from engage.serve.auth import Listener, auth_headers, token_digest
from engage.serve.controller import AppStatus, DeployOptions, DeployResult
from engage.serve.controller import deploy as deploy_model
from engage.serve.sampling import (
    SAMPLE_CONSUMERS,
    Sample,
    SampleConsumer,
    Sampler,
    SqliteSampleStore,
    read_samples,
)
from engage.serve.validation import InputSpec, RequestError, parse_predict

__all__ = [
    "SAMPLE_CONSUMERS",
    "AppStatus",
    "DeployOptions",
    "DeployResult",
    "InputSpec",
    "Listener",
    "RequestError",
    "Sample",
    "SampleConsumer",
    "Sampler",
    "SqliteSampleStore",
    "auth_headers",
    "deploy_model",
    "parse_predict",
    "read_samples",
    "serve_status",
    "stop_serving",
    "token_digest",
]


def serve_status(home, address=None):
    """Every serving app of ``home`` (see :func:`engage.serve.admin.status`)."""
    from engage.serve.admin import status

    return status(home, address)


def stop_serving(home, app=None, address=None):
    """Stop ``app`` or every app of ``home`` (see :func:`engage.serve.admin.stop`)."""
    from engage.serve.admin import stop

    return stop(home, app, address)
