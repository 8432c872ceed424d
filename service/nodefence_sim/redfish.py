"""Redfish BMCs for the simulated nodes (``/redfish/v1``): one ComputerSystem per node, Id = name.

Power is separate from the kubelet, as on real hardware: a node whose kubelet hangs (``down`` on
the control surface) still reads ``On``; only ``ForceOff`` turns it ``Off``. ``ForceOff`` stops
the kubelet exactly as ``down`` does (unless it is stopped already: stopping it again would make
its last sign of life "now" and hide how long it has been dead); ``On`` brings it back as ``up``
with a reboot does, so the node returns with a new bootID. A kubelet started again from the control
surface means the machine is running, so the system reads ``On`` again.

Each system reports its machine's SMBIOS ``UUID``, the Node's ``systemUUID``, as real hardware
does. A BMC can be made to lie (``SimBmcs.lying``): it accepts ``ForceOff``, reports ``Off`` and
leaves the machine running, the fault a false power-off proof comes from.

Credentials are generated per simulator; basic auth and sessions (``X-Auth-Token``) both work, so
both paths of a Redfish client can be exercised against it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from aiohttp import BasicAuth, web
from pydantic import SecretStr

from nodefence_sim.controllers.kubelet import system_uuid
from nodefence_sim.errors import ApiError

ROOT = "/redfish/v1"
SYSTEMS = f"{ROOT}/Systems"
SESSION_SERVICE = f"{ROOT}/SessionService"
SESSIONS = f"{SESSION_SERVICE}/Sessions"
RESET_TYPES = ("On", "ForceOff", "GracefulShutdown", "ForceRestart", "ForceOn")
USERNAME = "nodefence"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class PoweredCluster(Protocol):
    """What the BMCs need of a cluster, so that the simulator's ``Simulation`` and the real
    backend's ``RealCluster`` both stand behind them: a node's kubelet state, and stopping and
    starting the kubelet as the machine's power does. An unknown node raises ``ApiError`` 404."""

    def node_state(self, name: str) -> dict[str, Any]: ...

    def node_states(self) -> list[dict[str, Any]]: ...

    def node_down(self, name: str) -> dict[str, Any]: ...

    def node_up(self, name: str, *, reboot: bool = False) -> dict[str, Any]: ...

    def power_off(self, name: str) -> dict[str, Any]: ...


@dataclass
class SimBmcs:
    """The BMCs' shared state: the login, open sessions, and which machines are powered off."""

    username: str = USERNAME
    password: SecretStr = field(default_factory=lambda: SecretStr(secrets.token_urlsafe(18)))
    sessions: dict[str, SecretStr] = field(default_factory=dict)
    powered_off: set[str] = field(default_factory=set)
    # Every reset posted, in order, as (node, ResetType): tests count actions with it.
    resets: list[tuple[str, str]] = field(default_factory=list)
    # Machines whose BMC lies: a power-off is accepted and reported done, the machine runs on.
    lying: set[str] = field(default_factory=set)
    # Machines the lying BMCs claim are off.
    claimed_off: set[str] = field(default_factory=set)
    # Machines whose power-off does not take: the BMC accepts ForceOff and the machine stays
    # On, and the BMC says so (a stuck relay, a BMC that queues the action and drops it).
    stuck_on: set[str] = field(default_factory=set)


def bmcs_of(sim: object) -> SimBmcs:
    """The BMCs attached to a simulation as ``sim.bmcs``, attaching new ones if it has none."""
    existing = getattr(sim, "bmcs", None)
    if isinstance(existing, SimBmcs):
        return existing
    created = SimBmcs()
    setattr(sim, "bmcs", created)  # noqa: B010 - the attribute is not declared on every sim
    return created


def _error(status: int, code: str, message: str) -> web.Response:
    body = {
        "error": {
            "code": f"Base.1.8.{code}",
            "message": message,
            "@Message.ExtendedInfo": [{"MessageId": f"Base.1.8.{code}", "Message": message}],
        }
    }
    return web.json_response(body, status=status)


def _power_state(sim: PoweredCluster, bmcs: SimBmcs, name: str) -> str:
    """Off or On; an unknown node raises the simulator's not-found error."""
    if sim.node_state(name)["kubelet"] == "up":
        bmcs.powered_off.discard(name)
    if name in bmcs.lying and name in bmcs.claimed_off:
        return "Off"
    return "Off" if name in bmcs.powered_off else "On"


def _system(sim: PoweredCluster, bmcs: SimBmcs, name: str) -> dict[str, Any]:
    path = f"{SYSTEMS}/{name}"
    return {
        "@odata.id": path,
        "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
        "Id": name,
        "Name": name,
        "SystemType": "Physical",
        "UUID": system_uuid(name),
        "PowerState": _power_state(sim, bmcs, name),
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": f"{path}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": list(RESET_TYPES),
            }
        },
    }


def _reset(sim: PoweredCluster, bmcs: SimBmcs, name: str, reset_type: str) -> None:
    state = _power_state(sim, bmcs, name)
    bmcs.resets.append((name, reset_type))
    if name in bmcs.stuck_on and reset_type in ("ForceOff", "GracefulShutdown"):
        return
    if name in bmcs.lying:
        if reset_type in ("ForceOff", "GracefulShutdown"):
            bmcs.claimed_off.add(name)
        else:
            bmcs.claimed_off.discard(name)
        return
    if reset_type in ("ForceOff", "GracefulShutdown", "ForceRestart") and state == "On":
        sim.power_off(name)
        bmcs.powered_off.add(name)
    if reset_type in ("On", "ForceOn", "ForceRestart") and name in bmcs.powered_off:
        bmcs.powered_off.discard(name)
        sim.node_up(name, reboot=True)


def _authorised(bmcs: SimBmcs, request: web.Request) -> bool:
    token = request.headers.get("X-Auth-Token")
    if token is not None:
        return any(
            secrets.compare_digest(token, t.get_secret_value()) for t in bmcs.sessions.values()
        )
    header = request.headers.get("Authorization")
    if header is None:
        return False
    try:
        given = BasicAuth.decode(header)
    except ValueError:
        return False
    return secrets.compare_digest(given.login, bmcs.username) and secrets.compare_digest(
        given.password, bmcs.password.get_secret_value()
    )


async def _json_body(request: web.Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def add_redfish_routes(app: web.Application, sim: PoweredCluster) -> SimBmcs:
    bmcs = bmcs_of(sim)

    def guarded(handler: Handler) -> Handler:
        async def wrapper(request: web.Request) -> web.StreamResponse:
            if not _authorised(bmcs, request):
                response = _error(401, "NoValidSession", "authentication required")
                response.headers["WWW-Authenticate"] = 'Basic realm="nodefence-sim"'
                return response
            try:
                return await handler(request)
            except ApiError as exc:
                if exc.code == 404:
                    return _error(404, "ResourceMissingAtURI", f"{request.path} does not exist")
                return _error(exc.code, "GeneralError", exc.message)

        return wrapper

    async def service_root(_request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "@odata.id": ROOT,
                "@odata.type": "#ServiceRoot.v1_11_0.ServiceRoot",
                "Id": "RootService",
                "Name": "nodefence simulator BMCs",
                "RedfishVersion": "1.11.0",
                "Systems": {"@odata.id": SYSTEMS},
                "SessionService": {"@odata.id": SESSION_SERVICE},
                "Links": {"Sessions": {"@odata.id": SESSIONS}},
            }
        )

    async def systems(_request: web.Request) -> web.StreamResponse:
        names = [str(state["name"]) for state in sim.node_states()]
        return web.json_response(
            {
                "@odata.id": SYSTEMS,
                "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
                "Name": "Computer System Collection",
                "Members@odata.count": len(names),
                "Members": [{"@odata.id": f"{SYSTEMS}/{n}"} for n in names],
            }
        )

    async def system(request: web.Request) -> web.StreamResponse:
        return web.json_response(_system(sim, bmcs, request.match_info["name"]))

    async def reset(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        _power_state(sim, bmcs, name)
        body = await _json_body(request)
        reset_type = body.get("ResetType") if body is not None else None
        if reset_type not in RESET_TYPES:
            return _error(
                400,
                "ActionParameterValueNotInList",
                f"ResetType {reset_type!r} is not one of {', '.join(RESET_TYPES)}",
            )
        _reset(sim, bmcs, name, str(reset_type))
        return web.Response(status=204)

    async def session_service(_request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "@odata.id": SESSION_SERVICE,
                "@odata.type": "#SessionService.v1_1_8.SessionService",
                "Id": "SessionService",
                "ServiceEnabled": True,
                "Sessions": {"@odata.id": SESSIONS},
            }
        )

    async def login(request: web.Request) -> web.StreamResponse:
        body = await _json_body(request) or {}
        user, password = body.get("UserName"), body.get("Password")
        if not (
            isinstance(user, str)
            and isinstance(password, str)
            and secrets.compare_digest(user, bmcs.username)
            and secrets.compare_digest(password, bmcs.password.get_secret_value())
        ):
            return _error(401, "NoValidSession", "invalid user name or password")
        session_id = secrets.token_hex(8)
        token = secrets.token_urlsafe(24)
        bmcs.sessions[session_id] = SecretStr(token)
        path = f"{SESSIONS}/{session_id}"
        response = web.json_response(
            {"@odata.id": path, "Id": session_id, "UserName": user}, status=201
        )
        response.headers["X-Auth-Token"] = token
        response.headers["Location"] = path
        return response

    async def sessions(_request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "@odata.id": SESSIONS,
                "Members@odata.count": len(bmcs.sessions),
                "Members": [{"@odata.id": f"{SESSIONS}/{s}"} for s in sorted(bmcs.sessions)],
            }
        )

    async def logout(request: web.Request) -> web.StreamResponse:
        if bmcs.sessions.pop(request.match_info["id"], None) is None:
            return _error(404, "ResourceMissingAtURI", f"{request.path} does not exist")
        return web.Response(status=204)

    app.router.add_get(ROOT, service_root)
    app.router.add_get(ROOT + "/", service_root)
    app.router.add_get(SYSTEMS, guarded(systems))
    app.router.add_get(SYSTEMS + "/{name}", guarded(system))
    app.router.add_post(SYSTEMS + "/{name}/Actions/ComputerSystem.Reset", guarded(reset))
    app.router.add_get(SESSION_SERVICE, guarded(session_service))
    app.router.add_post(SESSIONS, login)
    app.router.add_get(SESSIONS, guarded(sessions))
    app.router.add_delete(SESSIONS + "/{id}", guarded(logout))
    return bmcs


def write_bmc_inventory(path: str | Path, url: str, sim: PoweredCluster) -> Path:
    """A BMC inventory (the format of ``nodefence.fencing.inventory``) for every simulated node,
    written owner-only because it holds the password."""
    bmcs = bmcs_of(sim)
    nodes = {
        str(state["name"]): {
            "driver": "redfish",
            "address": url,
            "system": f"{SYSTEMS}/{state['name']}",
            "username": bmcs.username,
            "password": bmcs.password.get_secret_value(),
            "auth": "session",
        }
        for state in sim.node_states()
    }
    target = Path(path)
    target.touch(mode=0o600, exist_ok=True)
    target.chmod(0o600)
    target.write_text(yaml.safe_dump({"nodes": nodes}, sort_keys=True))
    return target
