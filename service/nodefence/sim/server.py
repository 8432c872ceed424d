"""HTTP front of the simulator: the Kubernetes API, the control surface and metrics."""

from __future__ import annotations

import argparse

from aiohttp import web

from nodefence.sim.api import add_api_routes
from nodefence.sim.control import add_control_routes
from nodefence.sim.ksm import add_metrics_route
from nodefence.sim.simulation import Simulation


def build_app(sim: Simulation) -> web.Application:
    app = web.Application()
    app["simulation"] = sim
    add_control_routes(app, sim)
    add_metrics_route(app, sim)
    add_api_routes(app, sim)
    return app


def run_from_cli(args: argparse.Namespace) -> int:
    raise NotImplementedError
