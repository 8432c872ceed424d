"""Taint toleration matching, shared by the scheduler, the DaemonSet controller and eviction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``: an empty effect matches every effect, an empty key with
    ``Exists`` matches every key, ``Equal`` (the default operator) compares the values."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key != (taint.get("key") or ""):
        return not key and operator == "Exists"
    if operator == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.get("value") or "")
