"""`engage quickstart`: the repository's quickstart spec, or a copy of the packaged one.

Outside a checkout the packaged spec is written where the user is (``./quickstart.yaml``, or
under ENGAGE_HOME when that name is taken by another file), so that every command the
quickstart suggests afterwards names a file that exists.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from engage.cli.console import guarded, out
from engage.cli.options import AddressOption, HomeOption, SetOption, TrackingOption
from engage.errors import DeployError

if TYPE_CHECKING:  # the pipeline pulls in Ray; `engage --help` should not
    from engage.runtime.pipeline import PipelineResult
    from engage.spec.models import DeploySpec

REPO_SPEC = Path("pipelines/quickstart.yaml")
USER_SPEC = "quickstart.yaml"


def quickstart(
    set_: SetOption = None,
    address: AddressOption = None,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Run the quickstart pipeline end to end on synthetic smart-home data, then serve it."""

    def _body() -> None:
        from engage import env_vars
        from engage.cli.run import run_file

        engage_home = env_vars.engage_home(home)
        spec = quickstart_spec_path(Path.cwd(), engage_home)
        if spec != REPO_SPEC:
            out.print(f"spec: {spec} (engage's quickstart; edit it and `engage run {spec}`)")
        try:
            result = run_file(spec, set_ or [], address, tracking_uri, home, False)
        except DeployError as exc:  # the run and its registered model are safe: say what next
            if exc.run_result is not None:
                print_next_steps(out, exc.run_result, spec)
            raise
        if result.deployment is not None and result.deployment.result.url:
            from engage.spec import load_spec

            deploy = load_spec(spec, set_ or []).spec.deploy  # the section it was served with
            show_drift_caught(out, result, engage_home, deploy)
        print_next_steps(out, result, spec)

    guarded(_body)


def quickstart_spec_path(cwd: Path, home: Path) -> Path:
    """The spec the quickstart runs: pipelines/quickstart.yaml in a checkout, else a user copy.

    Parameters
    ----------
    cwd
        The working directory; a checkout has ``pipelines/quickstart.yaml`` under it.
    home
        The engage home folder, for the copy when ``cwd`` cannot take it.

    Raises
    ------
    OSError
        If neither ``cwd`` nor ``home`` can take the copy.
    """
    if (cwd / REPO_SPEC).is_file():
        return REPO_SPEC
    return write_user_spec(cwd, home)


def write_user_spec(cwd: Path, home: Path) -> Path:
    """Write the packaged quickstart spec as ``cwd/quickstart.yaml``; returns the path to show.

    An existing ``quickstart.yaml`` with other content is the user's and is left alone: the
    copy then goes to ``home/quickstart.yaml`` (engage's own folder, refreshed every time).
    The path comes back relative when it is in ``cwd``, so it reads as the user would type it.

    Raises
    ------
    OSError
        If neither folder can take the file.
    """
    text = (resources.files("engage") / "resources" / USER_SPEC).read_text(encoding="utf-8")
    mine = cwd / USER_SPEC
    if _holds(mine, text):
        return Path(USER_SPEC) if cwd.resolve() == Path.cwd().resolve() else mine
    home.mkdir(parents=True, exist_ok=True)
    copy = home / USER_SPEC
    copy.write_text(text, encoding="utf-8")
    return copy


def _holds(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` if it is absent; whether ``path`` then holds exactly ``text``.

    False for a read-only folder or a file of the user's own (other text, or not text).
    """
    try:
        if not path.exists():
            path.write_text(text, encoding="utf-8")
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def show_drift_caught(
    console: Console, result: PipelineResult, home: Path, deploy: DeploySpec | None = None
) -> None:
    """Send the served model a shifted batch and print the drift alert it raises.

    ``deploy`` (the deploy section the model is served with) sizes the rounds of shifted
    windows so that the first one reaches the replica's first drift check.
    """
    from engage.serve.demo import drift_demo, windows_per_round
    from engage.spec.models import DeploySpec

    served = result.deployment.result
    console.print()
    console.print(
        "[bold]Drift[/]: sending the served model windows where the temperature reads 6 °C "
        "higher and CO2 60% higher than in training..."
    )
    alert = drift_demo(served.url, home, windows_per_round(deploy or DeploySpec()))
    console.print(
        f"[red]alert {alert.rule}[/] ({alert.severity}) on {alert.model} version {alert.version} "
        f"after {alert.windows_sent} windows ({alert.seconds:.1f} s): features that moved: "
        f"[bold]{', '.join(alert.features)}[/]"
    )
    console.print(f"  {alert.summary}")
    console.print("  see it with: engage monitor alerts")


def print_next_steps(console: Console, result: PipelineResult, spec: Path = REPO_SPEC) -> None:
    """Say what the quickstart did and which commands to try next, naming ``spec``."""
    console.print()
    console.print("[bold]What happened[/]")
    console.print(
        "  synthetic smart-home sensor data was generated, windowed and split by time; a model "
        "trained data-parallel on Ray while its metrics were served for Prometheus; the run, "
        "its dataset, lineage and model (with ONNX and TorchScript copies) landed in MLflow"
        + ("; the model passed its gate and was registered" if result.registration else "")
        + ("; it is now served on Ray Serve and watched for drift." if result.deployment else ".")
    )
    console.print("[bold]Try next[/]")
    console.print(f"  engage run {spec} --set train.epochs=10 --set model.name=gru", markup=False)
    console.print("  engage monitor                 # live view of running jobs and alerts")
    console.print("  engage models promote smart-home-occupancy --reason 'first champion'")
    console.print("  engage serve status            # what is served; `engage serve stop` ends it")
    console.print(
        f"  cp {spec} my.yaml  # and point data.source at your CSV or Parquet", markup=False
    )
    console.print("  engage init my-project         # your own model, a sample CSV and a notebook")
    console.print("  python -m engage.spec.reference  # every spec field, as Markdown")
