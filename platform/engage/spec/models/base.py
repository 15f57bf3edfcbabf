"""The base of every spec model, and the constrained types they share: names, columns and
Ray resource requests (one validator for training workers and every other stage)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Name = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
ColumnName = Annotated[str, Field(min_length=1, max_length=200)]


def check_resources(v: dict[str, float]) -> dict[str, float]:
    """Validate a mapping of Ray resources: names not blank, every amount > 0.

    Raises
    ------
    ValueError
        A blank resource name or an amount that is not > 0 (pydantic locates the field).
    """
    blank = [k for k in v if not k.strip()]
    if blank:
        raise ValueError("resource names must not be empty")
    bad = {k: x for k, x in v.items() if not x > 0}
    if bad:
        raise ValueError(f"resource amounts must be > 0, got {bad}")
    return v


def _check_stage_resources(v: dict[str, float]) -> dict[str, float]:
    # A stage runs as one Ray task or actor: Ray reserves object-store memory for neither.
    if "object_store_memory" in v:
        raise ValueError(
            "object_store_memory cannot be reserved for one task or replica; ask for "
            "memory (bytes of heap) instead"
        )
    return v


#: Ray resources one stage's task or replica reserves: CPU, GPU, memory (bytes) or custom
#: ones (node labels), checked as ``train.resources_per_worker`` is, less the object store.
StageResources = Annotated[
    dict[str, float],
    Field(min_length=1),
    AfterValidator(check_resources),
    AfterValidator(_check_stage_resources),
]


class StrictModel(BaseModel):
    """Base of every spec model: unknown keys are errors and parsed values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
