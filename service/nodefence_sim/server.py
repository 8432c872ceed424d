"""HTTP front of the simulator: the Kubernetes API, the control surface and metrics."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from aiohttp import web

from nodefence_sim.api import add_api_routes
from nodefence_sim.control import add_control_routes
from nodefence_sim.ksm import add_metrics_route
from nodefence_sim.kubeconfig import write_kubeconfig
from nodefence_sim.redfish import add_redfish_routes, write_bmc_inventory
from nodefence_sim.simulation import Simulation

HOST = "127.0.0.1"
LISTENING = "nodefence simulate: listening on "
# Watches and injected hangs never finish on their own; shutdown must not wait a minute for them.
SHUTDOWN_TIMEOUT = 2.0


SIMULATION = web.AppKey("simulation", Simulation)


def build_app(sim: Simulation) -> web.Application:
    app = web.Application()
    app[SIMULATION] = sim
    add_control_routes(app, sim)
    add_metrics_route(app, sim)
    add_redfish_routes(app, sim)
    add_api_routes(app, sim)
    return app


async def start_server(sim: Simulation, port: int = 0) -> tuple[web.AppRunner, int]:
    """Serve ``sim`` on 127.0.0.1 (``port`` 0: any free port); returns the runner and the port."""
    runner = web.AppRunner(build_app(sim), shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port)
    await site.start()
    return runner, int(runner.addresses[0][1])


async def stop_server(sim: Simulation, runner: web.AppRunner) -> None:
    """Stop the simulation first: that ends open watches, so the server can close at once."""
    await sim.stop()
    await runner.cleanup()


class ScenarioError(Exception):
    """The scenario named on the command line could not be loaded."""


def simulation_from_scenario(scenario: str, k8s_version: str | None = None) -> Simulation:
    """The cluster a scenario describes; any failure to load it is a ``ScenarioError``."""
    try:
        return Simulation.from_scenario(scenario, k8s_version=k8s_version)
    except (ImportError, OSError, ValueError, TypeError, KeyError) as exc:
        raise ScenarioError(f"cannot load scenario {scenario!r}: {exc}") from exc


async def serve_until_signalled(
    sim: Simulation, port: int, kubeconfig_out: str | None, bmc_inventory_out: str | None = None
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sim.start()
    runner, bound = await start_server(sim, port)
    url = f"http://{HOST}:{bound}"
    try:
        if kubeconfig_out:
            write_kubeconfig(kubeconfig_out, url)
        if bmc_inventory_out:
            write_bmc_inventory(bmc_inventory_out, url, sim)
        print(LISTENING + url, flush=True)
        await stop.wait()
    finally:
        await stop_server(sim, runner)
    return 0


def run_from_cli(args: argparse.Namespace) -> int:
    try:
        sim = simulation_from_scenario(args.scenario, args.k8s_version)
    except ScenarioError as exc:
        print(f"nodefence simulate: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(
        serve_until_signalled(sim, args.port, args.kubeconfig_out, args.bmc_inventory_out)
    )
