from __future__ import annotations

from collections.abc import Iterator

import pytest

from .stack import Stack, background_stack


@pytest.fixture(scope="package")
def stack() -> Iterator[Stack]:
    """One receiver and seed cluster for the whole fuzz suite: every input here must leave the
    cluster unchanged, so sharing them is sound, and it keeps the suite fast."""
    with background_stack() as running:
        yield running
