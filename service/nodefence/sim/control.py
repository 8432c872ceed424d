"""The simulator's control surface: take nodes down and up (``/sim/v1``)."""

from __future__ import annotations

from aiohttp import web

from nodefence.sim.simulation import Simulation


def add_control_routes(app: web.Application, sim: Simulation) -> None:
    del app, sim
