"""The CLI tests' ``cluster``: the seed cluster in a process of its own (``operator_support``)."""

from __future__ import annotations

from .operator_support import cluster

__all__ = ["cluster"]
