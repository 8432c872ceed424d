"""``GET /metrics`` in kube-state-metrics format, so a real Prometheus can evaluate the
kube-prometheus node alerts against the simulated cluster."""

from __future__ import annotations

from aiohttp import web

from nodefence.sim.simulation import Simulation


def add_metrics_route(app: web.Application, sim: Simulation) -> None:
    del app, sim
