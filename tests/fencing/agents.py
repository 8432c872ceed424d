"""Scripted fence agents for the fault tests: small programs that speak the FenceAgentAPI (options
as ``key=value`` lines on stdin, ``status`` exits 0 for on and 2 for off) and misbehave in one
chosen way. Each run appends what it saw (its action, pid, process group, argv, environment and
whether the password arrived) to a log, so a test can check what nodefence asked and how."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

AGENT_PASSWORD = "agent-s3cret-Pa55"

# honest: does what it is asked. lies: "Success: Powered OFF" for off, status stays ON.
# off-exits-2: off exits 2 (the status code for off), status stays ON. garbage-status: status
# prints nonsense and exits 7. hang: every action starts a helper and sleeps. wait: status
# waits for a release file (so a test can read /proc while it runs). refuses: wrong password.
# chatty: prints 16 KiB and then the password, so that the read limit cuts through the password.
MODES = ("honest", "lies", "off-exits-2", "garbage-status", "hang", "wait", "refuses", "chatty")

# The options the test agents describe in their metadata, as fencing.py prints them: a key and
# its long option (for a key whose long option differs, fencing.py also lists the newer spelling
# that obsoletes it). fencing.py's common options, and those of the agents the tests stand in
# for (fence_redfish's systems-uri, fence_aws's keys, fence_openstack's project-name).
AGENT_OPTIONS = {
    "action": "action",
    "ipaddr": "ip",
    "ipport": "ipport",
    "login": "username",
    "passwd": "password",
    "passwd_script": "password-script",
    "port": "plug",
    "ssl_insecure": "ssl-insecure",
    "systems-uri": "systems-uri",
    "region": "region",
    "namespace": "namespace",
    "access_key": "access-key",
    "secret_key": "secret-key",
    "project-name": "project-name",
    "separator": "separator",
    "plug_separator": "plug-separator",
    "power_timeout": "power-timeout",
    "power_wait": "power-wait",
    "shell_timeout": "shell-timeout",
    "login_timeout": "login-timeout",
    "delay": "delay",
    "retry_on": "retry-on",
    "verbose": "verbose",
    "verbose_level": "verbose-level",
    "debug": "debug-file",
    "port_as_ip": "port-as-ip",
}


def metadata_xml(name: str, options: dict[str, str] | None = None) -> str:
    """An agent's ``action=metadata`` answer in fencing.py's shape."""
    lines = [f'<?xml version="1.0" ?>\n<resource-agent name="{name}" shortdesc="test agent">']
    lines.append("<parameters>")
    for key, long in (options or AGENT_OPTIONS).items():
        newer = long.replace("-", "_")
        spellings = (
            [(key, "")]
            if newer == key
            else [(newer, f' obsoletes="{key}"'), (key, ' deprecated="1"')]
        )
        for spelt, info in spellings:
            lines.append(f'\t<parameter name="{spelt}" unique="0" required="0"{info}>')
            lines.append(f'\t\t<getopt mixed="--{long}=[value]" />')
            lines.append("\t</parameter>")
    lines.append("</parameters>\n</resource-agent>")
    return "\n".join(lines)


_SCRIPT = r"""#!{python}
import json, os, subprocess, sys, time
STATE, LOG, MODE, PASSWORD, RELEASE = {state!r}, {log!r}, {mode!r}, {password!r}, {release!r}
params = {{}}
for line in sys.stdin.read().splitlines():
    if "=" in line:
        key, value = line.split("=", 1)
        params[key] = value
action = params.get("action", "")
if action == "metadata":
    print({metadata!r})
    sys.exit(0)
seen = {{
    "action": action, "pid": os.getpid(), "pgid": os.getpgid(0), "argv": sys.argv,
    "env": dict(os.environ), "password_ok": params.get("password") == PASSWORD,
    "keys": sorted(params),
}}
if MODE == "hang":
    helper = subprocess.Popen(["sleep", "600"])
    seen["helper"] = helper.pid
    # One in a process group of its own, still in the agent's session (as a shell's job).
    grouped = subprocess.Popen(["sleep", "600"], process_group=0)
    seen["grouped_helper"] = grouped.pid
with open(LOG, "a") as log:
    log.write(json.dumps(seen) + "\n")
if MODE == "hang":
    time.sleep(600)
if MODE == "chatty":
    # 16 KiB of output, its last "keep" bytes the start of the password, then the rest of it.
    keep = int(params.get("keep", "13"))
    sys.stdout.write("x" * (16 * 1024 - keep) + PASSWORD + "\n")
    sys.exit(1)
if MODE == "refuses" or params.get("password") != PASSWORD:
    print("ERROR: Failed: Unable to obtain correct plug status or plug is not available")
    print("password given was " + params.get("password", ""))
    sys.exit(1)
power = open(STATE).read().strip()
if action in ("off", "on"):
    if MODE == "honest":
        open(STATE, "w").write(action)
    if MODE == "off-exits-2" and action == "off":
        sys.exit(2)
    print("Success: Powered " + action.upper())
    sys.exit(0)
if action == "status":
    if MODE == "wait":
        while not os.path.exists(RELEASE):
            time.sleep(0.02)
    if MODE == "garbage-status":
        print("%%%% the quick brown fox " + PASSWORD)
        sys.exit(7)
    print("Status: " + power.upper())
    sys.exit(0 if power == "on" else 2)
print("unsupported action " + action)
sys.exit(1)
"""


class RunLog:
    """What a test agent logged of its runs, one JSON object a line: every test agent keeps one
    so that a test can check what nodefence asked it."""

    log: Path

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def actions(self) -> list[str]:
        return [run["action"] for run in self.runs()]


@dataclass
class ScriptedAgent(RunLog):
    path: Path
    state: Path
    log: Path
    release: Path

    @property
    def power(self) -> str:
        return self.state.read_text().strip()

    def parameters(self, **extra: str) -> dict[str, str]:
        return {"ip": "192.0.2.10", "username": "fencer", "password": AGENT_PASSWORD, **extra}


def scripted_agent(directory: Path, mode: str, *, power: str = "on") -> ScriptedAgent:
    assert mode in MODES
    directory.mkdir(parents=True, exist_ok=True)
    state = directory / f"{mode}.power"
    state.write_text(power)
    log = directory / f"{mode}.log"
    release = directory / f"{mode}.release"
    path = directory / f"fence_scripted_{mode.replace('-', '_')}"
    path.write_text(
        _SCRIPT.format(
            python=sys.executable,
            state=str(state),
            log=str(log),
            mode=mode,
            password=AGENT_PASSWORD,
            release=str(release),
            metadata=metadata_xml(path.name),
        )
    )
    path.chmod(0o755)
    return ScriptedAgent(path, state, log, release)


def two_agents(tmp_path: Path) -> tuple[Path, ScriptedAgent, ScriptedAgent]:
    """An inventory (written to ``bmcs.yaml``) with compute01 behind an agent that answers and
    compute02 behind one that refuses the login, as the probe tests read them."""
    good = scripted_agent(tmp_path / "good", "honest")
    bad = scripted_agent(tmp_path / "bad", "refuses")
    data: dict[str, Any] = {
        "defaults": {"fence-agent": {"parameters": good.parameters()}},
        "nodes": {
            "compute01": {"driver": "fence-agent", "agent": str(good.path)},
            "compute02": {"driver": "fence-agent", "agent": str(bad.path)},
        },
    }
    path = tmp_path / "bmcs.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, good, bad


def require_agent(name: str) -> str:
    """The installed agent's path, or a clean skip naming the package."""
    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package fence-agents)")
    return found


def process_gone(pid: int) -> bool:
    """No such process, or only its zombie awaiting a parent that is not us."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return status.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            alive.append(int(entry.name))
    return alive


def wait_until(check: Any, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def gone_wrapper(directory: Path, *, describes: str = "/usr/sbin/fence_redfish") -> Path:
    """A site's agent wrapper whose program is gone: it hands ``action=metadata`` to the agent it
    wraps (so it loads, as a wrapper does before its program is deleted), and every other action
    to a Python file that is not there, which exits 2 with "can't open file"."""
    wrapper = directory / "fence_site"
    wrapper.write_text(
        "#!/bin/sh\n"
        "input=$(cat)\n"
        'case "$input" in *action=metadata*) exec ' + describes + " -o metadata;; esac\n"
        f'printf "%s\\n" "$input" | exec {sys.executable} {directory}/gone/fence_site.py "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def load_yaml_inventory(tmp_path: Path, data: dict[str, Any]) -> Any:
    """``data`` written as the inventory file and loaded as nodefence loads it."""
    from nodefence.fencing.inventory import load_inventory

    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)
