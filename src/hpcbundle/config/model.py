"""Base class for every data model: strict keys, frozen values."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are errors (a typo must never be silently ignored); values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)
