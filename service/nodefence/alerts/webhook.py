"""Pydantic models of the Alertmanager webhook payload, version 4.

Parsing is lenient about what it does not use (unknown fields are kept, optional fields default)
and strict about what a decision depends on: the payload version, the alert status, and label
values, which must be strings so that a label never silently turns into something else.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

Labels = dict[StrictStr, StrictStr]


def _zero_time_is_unset(value: datetime | None) -> datetime | None:
    # Alertmanager renders Go's zero time ("0001-01-01T00:00:00Z") for an alert without an end.
    if value is not None and value.year == 1:
        return None
    return value


_ZERO_TIME = "Go's zero time (0001-01-01T00:00:00Z) means unset."


class WebhookAlert(BaseModel):
    """One alert of the notification; unknown members are accepted and ignored."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    starts_at: datetime | None = Field(default=None, alias="startsAt", description=_ZERO_TIME)
    ends_at: datetime | None = Field(default=None, alias="endsAt", description=_ZERO_TIME)
    generator_url: str = Field(default="", alias="generatorURL")
    fingerprint: str = ""

    _unset_zero_times = field_validator("starts_at", "ends_at")(_zero_time_is_unset)


class WebhookPayload(BaseModel):
    """An Alertmanager webhook notification, payload version 4. Parsing is lenient about
    members nodefence does not use and strict about those a decision depends on."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    version: Literal["4"]
    status: Literal["firing", "resolved"]
    alerts: list[WebhookAlert]
    receiver: str = ""
    group_key: str = Field(default="", alias="groupKey")
    truncated_alerts: int = Field(default=0, ge=0, alias="truncatedAlerts")
    group_labels: Labels = Field(default_factory=dict, alias="groupLabels")
    common_labels: Labels = Field(default_factory=dict, alias="commonLabels")
    common_annotations: Labels = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str = Field(default="", alias="externalURL")
