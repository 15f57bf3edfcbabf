"""``python -m engage.data.simulator SPEC``: stream a spec's simulation to Parquet shards.

The spec's ``data.source`` must be a ``simulation`` source with ``shards`` set. The shards
are written by parallel Ray tasks on a local Ray (all cores, or ``--cpus``), then opened as
a Ray Dataset to report its row count and schema. Bad input prints one message and exits
with the engage exit code (2 for the spec); nothing is printed as a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from engage.errors import EngageError, SpecError


def _source(spec_path: str):
    """The spec's simulation source, or a SpecError saying what to set."""
    from engage.spec import load_spec

    loaded = load_spec(spec_path)
    source = loaded.spec.data.source
    if source.type != "simulation" or source.shards is None:
        raise loaded.error(
            ("data", "source"),
            f"got a {source.type!r} source{'' if source.type != 'simulation' else ' without shards'};"
            " expected type: simulation with shards: {dir: ..., households_per_shard: ...}",
        )
    return source


def main(argv: list[str] | None = None) -> int:
    """Write the shards, read them back as a Ray Dataset, print a summary; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m engage.data.simulator", description=__doc__.splitlines()[0]
    )
    parser.add_argument("spec", help="pipeline spec whose data.source is a simulation with shards")
    parser.add_argument(
        "--cpus", type=int, default=os.cpu_count() or 1, help="Ray CPUs (default: all)"
    )
    args = parser.parse_args(argv)
    try:
        source = _source(args.spec)
    except EngageError as exc:
        print(f"error: {exc.headline}: {exc}", file=sys.stderr)
        return exc.exit_code
    import ray

    from engage.data.simulator import SENSORS
    from engage.data.simulator.shards import ensure_shards, read_shards

    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
             logging_level="WARNING")  # fmt: skip
    began = time.perf_counter()
    try:
        folder = ensure_shards(source, Path(args.spec).resolve().parent, parallel=True)
        seconds = time.perf_counter() - began
        dataset = read_shards(folder)
        rows = dataset.count()
        names = dataset.schema().names
    finally:
        ray.shutdown()
    shards = len(list(folder.glob("part-*.parquet")))
    size = sum(p.stat().st_size for p in folder.glob("part-*.parquet")) / 2**20
    print(f"{rows:,} rows ({source.households} households x {source.days} days) in {shards} "
          f"shards, {size:,.1f} MiB: {folder}")  # fmt: skip
    readings = rows * len(SENSORS)
    print(f"{readings:,} sensor readings; {seconds:.1f} s to write or reuse them "
          f"({readings / seconds:,.0f} readings/s)")  # fmt: skip
    print(f"columns: {', '.join(names)}")
    print(f'read it: ray.data.read_parquet("{folder}")  or  engage.data.simulator.read_shards(...)')
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except SpecError as exc:  # a spec problem found after loading (e.g. by a check)
        print(f"error: {exc.headline}: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
