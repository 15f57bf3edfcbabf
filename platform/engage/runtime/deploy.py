"""The deploy stage: serve a freshly registered model version and check one prediction.

It runs after the run ended (:meth:`engage.runtime.job.Job.deploy`), in a subprocess,
because this process already belongs to the job's Ray session while Serve needs its own.
A job that trains on the serving head starts that subprocess early
(:func:`engage.serve.deploy_process.start_early`): it joins the head and starts Serve while
training runs, and the deploy then hands it the registered version.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engage.data import PreparedData
from engage.errors import DeployError
from engage.runtime.options import RunOptions
from engage.runtime.session import resolve_address
from engage.runtime.stages import raw_inputs
from engage.serve.deploy_process import run_deploy
from engage.spec import LoadedSpec
from engage.tracking.store import resolve_tracking_uri

if TYPE_CHECKING:
    from engage.serve import DeployResult

_DEPLOY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Deployment:
    """What the deploy stage started, and the one prediction it checked it with."""

    result: DeployResult
    example_file: Path
    response: dict[str, Any]


def deploy(
    loaded: LoadedSpec, data: PreparedData, registration: Any, options: RunOptions
) -> Deployment:
    """Serve the registered version, then send it one test window as a smoke test.

    Raises
    ------
    DeployError
        The deploy failed, or the served model did not answer its first prediction.
    """
    import json
    import urllib.request

    spec = loaded.spec
    uri = resolve_tracking_uri(spec.tracking.tracking_uri, options.tracking_uri, options.home)
    result = _deploy_in_subprocess(
        {
            "model": f"{registration.name}/{registration.version}",
            "spec": spec.deploy.model_dump(mode="json"),
            "home": str(options.home),
            "tracking_uri": uri,
            "address": resolve_address(options.address),
        }
    )
    example = {"inputs": raw_inputs(data, 1).tolist()}
    example_file = options.home / "serve" / result.app / "example.json"
    example_file.parent.mkdir(parents=True, exist_ok=True)
    example_file.write_text(json.dumps(example))
    predict_url = f"{result.url}/predict"
    from engage.serve import auth_headers

    headers = {"Content-Type": "application/json", **auth_headers(result.token_env)}
    request = urllib.request.Request(predict_url, data=example_file.read_bytes(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            response = json.loads(answer.read())
    except (OSError, ValueError) as exc:  # HTTPError and URLError are OSErrors
        raise DeployError(
            f"the served model did not answer its first prediction at {predict_url}: {exc}",
            hint="see `engage serve status`; the registered model is unaffected",
        ) from None
    return Deployment(result, example_file, response)


def _deploy_in_subprocess(options: dict[str, Any]) -> DeployResult:
    """See engage.serve.deploy_job: this process already belongs to the job's Ray session.

    Raises
    ------
    DeployError
        The deploy failed or outlived its time-out; the subprocess's output is kept in
        ``<home>/serve/deploy-stage.log`` and named in the hint.
    """
    from engage.serve import DeployResult

    try:
        stdout, stderr, returncode = run_deploy(options, _DEPLOY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise DeployError(
            f"the deploy stage did not finish within {_DEPLOY_TIMEOUT_S:.0f} s",
            hint="see `engage serve status`; a busy machine slows Serve's start",
        ) from None
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    payload = json.loads(lines[-1]) if lines else {}
    if returncode != 0 or "error" in payload or not payload:
        log = Path(options["home"]) / "serve" / "deploy-stage.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(stdout + stderr)
        message = payload.get("error") or (stderr.strip().splitlines() or ["no output"])[-1]
        hint = payload.get("hint")
        raise DeployError(
            f"deploy stage failed: {message}",
            hint=(f"{hint}; " if hint else "") + f"its output is in {log}",
        )
    payload["replaced"] = tuple(payload.get("replaced", ()))
    return DeployResult(**payload)
