"""``nodefence simulate --backend real``: bring up the real control plane, load the scenario
into it, and serve the simulator's control surface and Redfish BMCs in front of it.

The Kubernetes API itself is the real kube-apiserver (TLS, token auth); ``--kubeconfig-out``
points at it. This server, on ``--port``, serves only what the real cluster has no API for:
the nodes' kubelets (``/sim/v1/nodes``), their machines' BMCs (``/redfish/v1``), the request
log (``/sim/v1/requests``, from the API server's audit log) and the kube-state-metrics series of
the real objects (``/metrics``). Endpoints of
the simulator that have no real counterpart here answer 501 with the reason, so a test written
for the simulator fails loudly instead of reading something invented.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import shutil
import signal
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, NoReturn

import yaml
from aiohttp import web

from nodefence_sim.control import PREFIX, _BadRequest, _body, _guarded, problem
from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.errors import ApiError
from nodefence_sim.kubeconfig import CLUSTER, kubeconfig
from nodefence_sim.real.cluster import RealCluster
from nodefence_sim.real.components import (
    ADMIN,
    HARNESS,
    KUBE_PROXY,
    ControlPlane,
    ControlPlaneError,
    find_binary,
)
from nodefence_sim.real.images import ImageError
from nodefence_sim.real.loader import READY_TIMEOUT, load, wait_for
from nodefence_sim.real.machines import (
    HOST_IN_CLUSTER,
    MachineError,
    RealMachines,
    kubelet_addresses,
    real_node_names,
    start_machines,
)
from nodefence_sim.real.metrics import add_metrics_route
from nodefence_sim.real.rest import Rest
from nodefence_sim.real.storage import CSI_ENV, find_csi, register_kwok_nodes, start_storage
from nodefence_sim.redfish import add_redfish_routes, write_bmc_inventory
from nodefence_sim.scenario import Scenario, load_scenario
from nodefence_sim.server import HOST, LISTENING, SHUTDOWN_TIMEOUT

DEFAULT_GRACE = "50s"
NO_BACKDATING = (
    "sinceSeconds must be 0 on the real backend: the real controllers stamp their own times, so "
    "a death or recovery cannot be backdated; use short policy windows and "
    "--node-monitor-grace-period instead"
)
NOT_REAL = {
    "notready": "kwok has no way to report a live kubelet NotReady; use down",
    "clock": "every process here reads the machine's clock; a kubelet's skew cannot be set",
}


def add_real_control_routes(app: web.Application, cluster: RealCluster) -> None:
    async def list_nodes(_request: web.Request) -> web.StreamResponse:
        return web.json_response({"nodes": cluster.node_states()})

    async def get_node(request: web.Request) -> web.StreamResponse:
        return web.json_response(cluster.node_state(request.match_info["name"]))

    async def down(request: web.Request) -> web.StreamResponse:
        body = await _body(request, frozenset({"sinceSeconds"}))
        if body.get("sinceSeconds", 0):
            raise _BadRequest(NO_BACKDATING)
        return web.json_response(cluster.node_down(request.match_info["name"]))

    async def up(request: web.Request) -> web.StreamResponse:
        body = await _body(request, frozenset({"sinceSeconds", "reboot"}))
        if body.get("sinceSeconds", 0):
            raise _BadRequest(NO_BACKDATING)
        name = request.match_info["name"]
        return web.json_response(cluster.node_up(name, reboot=body.get("reboot", False)))

    async def recreate(request: web.Request) -> web.StreamResponse:
        await _body(request, frozenset())
        return web.json_response(cluster.recreate_node(request.match_info["name"]))

    async def requests(request: web.Request) -> web.StreamResponse:
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            return web.json_response({"error": "since must be an integer"}, status=400)
        audit = cluster.plane.audit
        assert audit is not None, "the control plane is started before the server"
        records, cursor = await asyncio.to_thread(audit.requests, since)
        return web.json_response({"requests": records, "cursor": cursor})

    def not_implemented(reason: str) -> Any:
        async def handler(_request: web.Request) -> web.StreamResponse:
            return problem(501, reason)

        return handler

    app.router.add_get(PREFIX, _guarded(list_nodes))
    app.router.add_get(PREFIX + "/{name}", _guarded(get_node))
    app.router.add_post(PREFIX + "/{name}/down", _guarded(down))
    app.router.add_post(PREFIX + "/{name}/up", _guarded(up))
    app.router.add_post(PREFIX + "/{name}/recreate", _guarded(recreate))
    for action, reason in NOT_REAL.items():
        app.router.add_post(PREFIX + "/{name}/" + action, not_implemented(reason))
    app.router.add_get("/sim/v1/requests", requests)


def build_app(cluster: RealCluster) -> web.Application:
    app = web.Application()
    add_real_control_routes(app, cluster)
    add_redfish_routes(app, cluster)
    add_metrics_route(app, cluster.rest)
    return app


def write_real_kubeconfig(path: str, plane: ControlPlane) -> Path:
    """The simulator backend's kubeconfig, pointed at the real API server with its CA inline
    (the run's directory is removed at exit; a copied file keeps working while the run lasts)
    and the ``admin`` token. Written owner-only and atomically, as the simulator's is."""
    config = kubeconfig(plane.server)
    cluster = config["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = base64.b64encode(plane.ca_cert.read_bytes()).decode()
    config["users"][0] = {"name": CLUSTER, "user": {"token": plane.tokens[ADMIN]}}
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.touch(mode=0o600)
    partial.chmod(0o600)
    partial.write_text(yaml.safe_dump(config, sort_keys=False))
    partial.replace(target)
    return target


async def _serve(cluster: RealCluster, args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(build_app(cluster), shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, HOST, args.port).start()
    url = f"http://{HOST}:{runner.addresses[0][1]}"
    try:
        if args.kubeconfig_out:
            write_real_kubeconfig(args.kubeconfig_out, cluster.plane)
        if args.bmc_inventory_out:
            write_bmc_inventory(args.bmc_inventory_out, url, cluster)
        if cluster.machines is not None:
            inside = cluster.machines.network.expose(runner.addresses[0][1])
            print(f"nodefence simulate: pods on real nodes reach it at {inside}", flush=True)
        print(LISTENING + url, flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def _exit_on_signal(signum: int, _frame: types.FrameType | None) -> NoReturn:
    """A signal during start-up unwinds through the ``finally`` that stops the processes."""
    raise SystemExit(128 + signum)


def _registered_ready(rest: Rest, names: list[str]) -> bool:
    """Every one of ``names`` registered by its kubelet and Ready."""
    for name in names:
        try:
            node = rest.get(f"/api/v1/nodes/{name}")
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        conditions = node.get("status", {}).get("conditions") or []
        if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return False
    return True


def run_from_cli(args: argparse.Namespace) -> int:
    try:
        binary = find_binary()
        csi = find_csi()
        scenario: Scenario = load_scenario(args.scenario)
    except ControlPlaneError as exc:
        print(f"nodefence simulate: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"nodefence simulate: cannot load scenario {args.scenario!r}: {exc}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_on_signal)
    workdir = Path(tempfile.mkdtemp(prefix="nodefence-sim-real-"))
    nodes = [str(o["metadata"]["name"]) for o in scenario.objects if o.get("kind") == "Node"]
    real_nodes = real_node_names(args.real_nodes)
    try:
        kubelet_hosts = kubelet_addresses(real_nodes) if real_nodes else {}
    except MachineError as exc:
        print(f"nodefence simulate: {exc}", file=sys.stderr)
        return 1
    plane = ControlPlane(
        binary,
        workdir,
        nodes,
        node_monitor_grace_period=args.node_monitor_grace_period or DEFAULT_GRACE,
        real_node_names=real_nodes,
        advertise_address=HOST_IN_CLUSTER if real_nodes else "127.0.0.1",
        kubelet_hosts=kubelet_hosts,
    )
    machines: RealMachines | None = None
    failed = False
    try:
        plane.start()
        rest = Rest(plane.server, plane.ca_cert, plane.tokens[HARNESS])
        storage = None if csi is None else start_storage(plane, rest, csi)
        if storage is None:
            print(
                f"nodefence simulate: no CSI driver ({CSI_ENV} unset; `make csi` builds it)",
                file=sys.stderr,
            )
        # The scenario first, on its kwok nodes as without real ones; then the machines.
        loaded = load(rest, scenario, plane.start_kwok)
        if storage is not None:
            register_kwok_nodes(rest, nodes)
        if real_nodes:
            machines = start_machines(
                count=len(real_nodes),
                workdir=workdir,
                binary=binary,
                api_port=plane.api_port,
                ca_cert=plane.ca_cert,
                kubelet_hosts=kubelet_hosts,
                kubeconfig_for=plane.kubeconfig_for,
                spawn=plane.spawn_command,
                system_uuid=system_uuid,
                extra_images=[Path(image) for image in args.node_image or []],
                storage=storage,
            )
            wait_for(lambda: _registered_ready(rest, real_nodes), READY_TIMEOUT, "real nodes Ready")
            machines.start_proxy(binary, plane.kubeconfig_for(KUBE_PROXY))
        cluster = RealCluster(plane, rest, loaded, machines=machines)
        asyncio.run(_serve(cluster, args))
    except (ControlPlaneError, MachineError, ImageError, TimeoutError, ApiError) as exc:
        failed = True
        print(f"nodefence simulate: the real cluster did not come up: {exc}", file=sys.stderr)
        print(f"nodefence simulate: the components' logs are kept in {workdir}", file=sys.stderr)
        return 1
    finally:
        if machines is not None:
            machines.stop()
        plane.stop()
        if not failed:
            with contextlib.suppress(OSError):
                shutil.rmtree(workdir)
    return 0
