"""A fence agent whose ``list`` action names the machines it can act on (FenceAgentAPI:
``plug,alias`` lines), as fence_openstack, fence_virsh or fence_vmware_rest do: options as
``key=value`` lines on stdin, one power state per plug, every run logged (its action, argv,
environment and whether the password arrived) so that a test can check what nodefence asked."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .agents import RunLog, metadata_xml

LIST_PASSWORD = "list-agent-Pa55-s3cret"

_SCRIPT = r"""#!{python}
import json, os, sys
STATES, LOG, LISTING, PASSWORD = {states!r}, {log!r}, {listing!r}, {password!r}
params = {{}}
for line in sys.stdin.read().splitlines():
    if "=" in line:
        key, value = line.split("=", 1)
        params[key] = value
action = params.get("action", "")
if action == "metadata":
    print({metadata!r})
    sys.exit(0)
with open(LOG, "a") as log:
    log.write(json.dumps({{
        "action": action, "argv": sys.argv, "env": dict(os.environ),
        "password_ok": params.get("password") == PASSWORD, "plug": params.get("plug", ""),
    }}) + "\n")
if params.get("password") != PASSWORD:
    print("ERROR: Failed: Unable to connect/login to fencing device")
    sys.exit(1)
if action == "list":
    print("Warning: a deprecation notice, as agents print")
    sys.stdout.write(open(LISTING).read())
    sys.exit(0)
plug = params.get("plug", "")
state = os.path.join(STATES, plug)
if not plug or not os.path.exists(state):
    print("ERROR: Failed: Unable to obtain correct plug status or plug is not available")
    sys.exit(1)
if action in ("on", "off"):
    open(state, "w").write(action)
    print("Success: Powered " + action.upper())
    sys.exit(0)
if action == "status":
    power = open(state).read().strip()
    print("Status: " + power.upper())
    sys.exit(0 if power == "on" else 2)
print("unsupported action " + action)
sys.exit(1)
"""


@dataclass
class ListingAgent(RunLog):
    path: Path
    states: Path
    log: Path

    def power(self, plug: str) -> str:
        return (self.states / plug).read_text().strip()

    def parameters(self, plug: str) -> dict[str, str]:
        return {"ip": "192.0.2.40", "username": "fencer", "password": LIST_PASSWORD, "plug": plug}


def listing_agent(directory: Path, machines: dict[str, str]) -> ListingAgent:
    """An agent listing ``machines`` (plug -> alias), each powered on."""
    directory.mkdir(parents=True, exist_ok=True)
    states = directory / "states"
    states.mkdir()
    for plug in machines:
        (states / plug).write_text("on")
    listing = directory / "listing"
    listing.write_text("".join(f"{plug},{alias}\n" for plug, alias in machines.items()))
    log = directory / "runs.log"
    path = directory / "fence_listing"
    path.write_text(
        _SCRIPT.format(
            python=sys.executable,
            states=str(states),
            log=str(log),
            listing=str(listing),
            password=LIST_PASSWORD,
            metadata=metadata_xml(path.name),
        )
    )
    path.chmod(0o755)
    return ListingAgent(path, states, log)
