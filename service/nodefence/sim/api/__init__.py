"""The Kubernetes REST API over the simulator's store."""

from __future__ import annotations

from aiohttp import web

from nodefence.sim.simulation import Simulation


def add_api_routes(app: web.Application, sim: Simulation) -> None:
    """Register discovery and resource routes for every served type."""
    del app, sim
