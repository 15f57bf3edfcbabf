"""Deploy in a process of its own: ``python -m engage.serve.deploy_job`` < options JSON.

The pipeline's deploy stage uses it because a process that has already joined one Ray
cluster (the job's own, with its own auth token) cannot join another one: Ray keeps the
first session's token. Prints the DeployResult as JSON; errors keep engage's exit codes,
and any other failure is reported as one JSON line too (its traceback on stderr), so the
pipeline's deploy stage always says what failed.

Options without a ``model`` start it early (:func:`engage.serve.deploy_process.start_early`):
it joins the cluster and starts Serve's controller and proxies while the job still trains,
then reads a second line with the model (end of input: nothing to deploy, it exits 0). A
failure of that head start is only printed to stderr: the deploy itself repeats every step
and reports it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import traceback
from pathlib import Path

from engage.errors import EngageError


def main() -> int:
    """Read DeployOptions as JSON on stdin, deploy, print the DeployResult (or error) as JSON."""
    from engage.serve import DeployOptions, deploy_model
    from engage.spec.models import DeploySpec

    raw = json.loads(sys.stdin.readline())
    if "model" not in raw:  # started early: get Serve going, then wait for the model
        _prepare(raw)
        line = sys.stdin.readline()
        if not line.strip():
            return 0
        raw |= json.loads(line)
    options = DeployOptions(
        model=raw["model"],
        spec=DeploySpec.model_validate(raw["spec"]),
        home=Path(raw["home"]),
        tracking_uri=raw.get("tracking_uri"),
        address=raw.get("address"),
        hooks=bool(raw.get("hooks", True)),
    )
    try:
        result = deploy_model(options)
    except EngageError as exc:
        print(json.dumps({"error": exc.message, "hint": exc.hint, "type": type(exc).__name__}))
        return exc.exit_code
    except Exception as exc:  # Serve's or Ray's own failure: one line out, traceback to the log
        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "type": type(exc).__name__}))
        return 70
    print(json.dumps(dataclasses.asdict(result)))
    return 0


def _prepare(raw: dict) -> None:
    """Join the cluster and start Serve for the deploy to come; a failure is only printed."""
    from engage.serve.controller import prepare
    from engage.spec.models import DeploySpec

    try:
        prepare(DeploySpec.model_validate(raw["spec"]), Path(raw["home"]), raw.get("address"))
    except Exception:  # the deploy repeats each step and reports its failure properly
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
