"""``nodefence check-fencing`` shows what a BMC reports, never lets it drive the operator's
terminal: a Redfish system whose ``UUID`` carries OSC 52 (write the clipboard), a carriage
return and a forged line is printed with every control character as a visible escape, cells
aligned as shown, while ``-o json`` keeps the reported value exact."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from nodefence_sim.testing import SimulatorHandle

from .test_check_fencing import nodefence, sim_inventory

FORGED = "compute01 redfish on 0.01 ok"
HOSTILE_UUID = f"\x1b]52;c;ZWNobyBwd25lZA==\x07\r{FORGED}\n{FORGED}\x9b2J\u202e"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")
SYSTEM = "/redfish/v1/Systems/compute01"


@pytest.fixture
async def hostile_bmc() -> AsyncIterator[str]:
    """A BMC that answers with basic auth and reports ``HOSTILE_UUID`` as its system's UUID."""

    async def system(_request: web.Request) -> web.Response:
        return web.json_response(
            {"@odata.id": SYSTEM, "Id": "compute01", "UUID": HOSTILE_UUID, "PowerState": "On"}
        )

    app = web.Application()
    app.router.add_get(SYSTEM, system)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_hostile_reported_uuid_is_shown_escaped_and_kept_exact_in_json(
    cluster: SimulatorHandle, hostile_bmc: str, tmp_path: Path
) -> None:
    inventory = sim_inventory(tmp_path, cluster)
    inventory["nodes"]["compute01"].update(address=hostile_bmc, auth="basic")

    code, out, err = await nodefence(
        tmp_path, "check-fencing", inventory=inventory, kubeconfig=cluster.kubeconfig
    )

    assert code == 1, out + err
    for char in RAW:
        assert char not in out + err, f"{char!r} reached the terminal:\n{out!r}"
    lines = out.split("\n")
    assert not [line for line in lines if line.startswith(FORGED)], out
    (identity,) = [line for line in lines if line.startswith("IDENTITY compute01: ")]
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\rcompute01 redfish on" in identity
    assert f"\\n{FORGED}\\x9b2J\\u202e" in identity
    # Still one row per node, each under its header's columns.
    header, *rows = lines
    assert header.split()[:6] == ["NODE", "DRIVER", "STATE", "SECONDS", "IDENTITY", "TARGET"]
    assert [r.split()[0] for r in rows[:5]] == sorted(inventory["nodes"])

    code, out, err = await nodefence(
        tmp_path, "check-fencing", "-o", "json", inventory=inventory, kubeconfig=cluster.kubeconfig
    )
    assert code == 1, out + err
    (check,) = [c for c in json.loads(out)["identities"] if c["node"] == "compute01"]
    assert check["reported"] == HOSTILE_UUID.strip()
    assert not check["bound"]
