"""What the README tells a new user holds: two set-up commands and where they put the CLI,
every setting in the Settings table, and the simulated cluster's control surface as documented,
each endpoint and example answered by the simulator."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from nodefence.settings import environment_names
from nodefence_sim.redfish import bmcs_of
from nodefence_sim.testing import SimulatorHandle, running_simulator

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    return README.split(f"\n{title}\n", 1)[1].split("\n## ", 1)[0]


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.DOTALL)


def commands(block: str) -> list[str]:
    """The command lines of a shell block: comments dropped, continuations joined."""
    joined = block.replace("\\\n", " ")
    lines = (line.split("#", 1)[0].strip() for line in joined.splitlines())
    return [line for line in lines if line]


def test_try_it_is_two_commands_and_says_where_they_put_the_cli() -> None:
    try_it = section("## Try it")
    assert commands(sh_blocks(try_it)[0]) == ["make demo", "make test"]
    assert "`.venv/bin/nodefence --help`" in try_it
    assert "`source .venv/bin/activate`" in try_it
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^VENV \?= \.venv$", makefile, re.MULTILINE)
    assert re.search(r"^BIN := \$\(VENV\)/bin$", makefile, re.MULTILINE)
    assert "$(BIN)/nodefence demo" in makefile
    # The CLI of the venv make installs (the one running these tests) answers as the README says.
    cli = Path(sys.executable).parent / "nodefence"
    done = subprocess.run(
        [str(cli), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "demo" in done.stdout


def documented_settings() -> set[str]:
    table = section("## Settings").split("\n\n| variable |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    named: set[str] = set()
    for row in rows:
        first = row.split(" | ", 1)[0]
        named.update(re.findall(r"`([A-Z_]+)`", first))
    return named


def test_every_setting_has_a_row_in_the_settings_table() -> None:
    named = documented_settings()
    missing = sorted(set(environment_names()) - named)
    assert missing == [], f"settings the README's table does not document: {missing}"
    unknown = sorted(named - set(environment_names()) - {"NODEFENCE_PORT"})
    assert unknown == [], f"rows for settings nodefence does not read: {unknown}"


def test_the_settings_check_catches_a_setting_left_out() -> None:
    named = documented_settings()
    assert "NODEFENCE_HOST" in named
    assert set(environment_names()) - (named - {"NODEFENCE_HOST"}) == {"NODEFENCE_HOST"}


# --- the simulated cluster's control surface ---------------------------------------------------

ENDPOINT = re.compile(r"`(GET|POST|DELETE) (/[^`\s]+)`(?: `(\{.*?\})`)?")


def endpoints() -> list[tuple[str, str, str | None]]:
    surface = section("### The simulated cluster's control surface").split("\n### ", 1)[0]
    return ENDPOINT.findall(surface)


@pytest.fixture
async def seed() -> AsyncIterator[SimulatorHandle]:
    async with running_simulator(scenario="seed") as handle:
        yield handle


async def test_every_endpoint_of_the_control_surface_answers_as_documented(
    seed: SimulatorHandle,
) -> None:
    documented = endpoints()
    paths = {path for _, path, _ in documented}
    assert {
        "/sim/v1/nodes/{name}/down",
        "/sim/v1/nodes/{name}/up",
        "/sim/v1/requests",
        "/redfish/v1/Systems/{name}/Actions/ComputerSystem.Reset",
    } <= {p.split("?", 1)[0] for p in paths}
    bmcs = bmcs_of(seed.sim)
    credentials = f"{bmcs.username}:{bmcs.password.get_secret_value()}".encode()
    auth = {"Authorization": "Basic " + base64.b64encode(credentials).decode()}
    async with aiohttp.ClientSession() as session:
        for method, path, shown in documented:
            url = seed.url + path.replace("{name}", "compute01").replace("CURSOR", "0")
            body = shown or None
            if path.endswith("/Sessions"):
                body = json.dumps(
                    {"UserName": bmcs.username, "Password": bmcs.password.get_secret_value()}
                )
            async with session.request(
                method,
                url,
                data=body.encode() if body is not None else None,
                headers=auth if path.startswith("/redfish/") else None,
            ) as response:
                text = await response.text()
                assert response.status < 300, (method, path, body, response.status, text)
            if path.endswith("/down"):
                # Taken down, the node comes back up with the next row; nothing else waits.
                assert json.loads(text)["kubelet"] == "down"


def _bash(script: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run(
        [bash, "-ec", script], capture_output=True, text=True, timeout=120, check=False
    )


async def test_the_control_surface_example_runs(seed: SimulatorHandle) -> None:
    if shutil.which("curl") is None:
        pytest.fail("curl is required to run the README's example")
    surface = section("### The simulated cluster's control surface")
    (block,) = sh_blocks(surface)
    lines = commands(block)
    assert lines
    answers = []
    for line in lines:
        assert line.startswith("curl "), line
        script = line.replace("PORT", str(seed.port)).replace("curl ", "curl -fsS ", 1)
        # In a thread: the simulator answering curl runs on this test's event loop.
        done = await asyncio.to_thread(_bash, script)
        assert done.returncode == 0, (line, done.stderr)
        answers.append(json.loads(done.stdout))
    died, shown = answers
    assert (shown["name"], shown["kubelet"]) == ("compute01", "down")
    assert died["kubelet"] == "down"
    assert died["leaseRenewTime"] == shown["leaseRenewTime"]
