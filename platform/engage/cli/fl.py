"""``engage fl``: federated learning utilities (keys for now)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engage.cli.console import guarded, out
from engage.cli.options import HomeOption, SetOption

fl_app = typer.Typer(
    name="fl", help="Federated learning: per-client signing keys.", no_args_is_help=True
)


@fl_app.command("keys")
def keys(
    file: Annotated[Path, typer.Argument(help="Federated pipeline spec (YAML).")],
    set_: SetOption = None,
    home: HomeOption = None,
    rotate: Annotated[bool, typer.Option(help="Replace existing keys with new ones.")] = False,
) -> None:
    """Provision one signing key per client of FILE under ENGAGE_HOME/fl/keys (mode 0600)."""

    def _body() -> None:
        from engage import env_vars
        from engage.federated.keys import KeyStore, key_dir

        loaded, clients = _clients(file, set_ or [])
        scheme = loaded.spec.federated.signing
        store = KeyStore(key_dir(env_vars.engage_home(home)))
        made = store.provision(clients, scheme, rotate=rotate)
        kept = len(clients) - len(made)
        out.print(
            f"[green]✓[/] {scheme} keys for {len(clients)} clients under {store.root}: "
            f"{len(made)} new, {kept} kept"
        )

    guarded(_body)


def _clients(file: Path, sets: list[str]):
    from engage.data.sources import key_columns, load_frame
    from engage.spec import load_spec

    loaded = load_spec(file, sets)
    if loaded.spec.federated is None:
        raise loaded.error(("federated",), "missing; expected a federated section")
    _, group = key_columns(loaded.spec.data)
    if group is None:
        raise loaded.error(("data", "source", "group"), "got none; expected a client column")
    ids = list(dict.fromkeys(load_frame(loaded.spec.data, loaded.base_dir)[group].astype(str)))
    n = loaded.spec.federated.clients
    return loaded, ids[:n] if n else ids
