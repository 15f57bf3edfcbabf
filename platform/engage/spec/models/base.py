"""The base of every spec model, and the constrained string types they share."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Name = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
ColumnName = Annotated[str, Field(min_length=1, max_length=200)]


class StrictModel(BaseModel):
    """Base of every spec model: unknown keys are errors and parsed values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
