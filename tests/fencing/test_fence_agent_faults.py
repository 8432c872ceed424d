"""The fence-agent driver against agents that misbehave: none of them yields a reading of Off,
each says why, and no credential reaches a command line, an environment or any output."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import SecretStr

from nodefence.fencing.drivers.fence_agent import FenceAgentDriver, ParameterValue, is_secret_key

from .agents import (
    AGENT_PASSWORD,
    ScriptedAgent,
    group_alive,
    process_gone,
    scripted_agent,
    wait_until,
)


def driver(agent: ScriptedAgent, password: str = AGENT_PASSWORD) -> FenceAgentDriver:
    parameters: dict[str, ParameterValue] = {
        key: SecretStr(value) if is_secret_key(key) else value
        for key, value in agent.parameters(password=password, plug="vm-7").items()
    }
    return FenceAgentDriver(str(agent.path), parameters, poll_interval=0.1)


def no_secret(*texts: str) -> None:
    for text in texts:
        assert AGENT_PASSWORD not in text


async def test_an_honest_agent_is_proof_only_through_a_separate_status_run(
    tmp_path: Path,
) -> None:
    agent = scripted_agent(tmp_path, "honest")
    reading = await driver(agent).power_off(timeout=20)
    assert reading.state == "off", reading.detail
    assert reading.raw_state == "Status: OFF"
    assert reading.reset_sent
    assert reading.source == f"fence-agent {agent.path.name} ip=192.0.2.10 plug=vm-7"
    # Read, off once, then status until Off: the off action's own answer was not taken.
    assert agent.actions() == ["status", "off", "status"]
    assert agent.power == "off"


async def test_a_machine_already_off_gets_no_action(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "honest", power="off")
    reading = await driver(agent).power_off(timeout=20)
    assert reading.state == "off"
    assert not reading.reset_sent
    assert agent.actions() == ["status"]


async def test_power_on_is_read_back_on(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "honest", power="off")
    reading = await driver(agent).power_on(timeout=20)
    assert reading.state == "on", reading.detail
    assert agent.actions() == ["status", "on", "status"]


async def test_powered_off_printed_while_status_stays_on_is_no_proof(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "lies")
    reading = await driver(agent).power_off(timeout=12)
    assert reading.state == "unknown"
    assert "status still reports Status: ON" in reading.detail
    assert "Success: Powered OFF" in reading.detail  # what the agent claimed, for the record
    # One off action, however long the status read-back went on.
    assert agent.actions().count("off") == 1
    assert set(agent.actions()) == {"status", "off"}


async def test_an_off_action_exiting_2_is_not_taken_for_off(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "off-exits-2")
    reading = await driver(agent).power_off(timeout=15)
    assert reading.state == "unknown"
    assert "off exited 2" in reading.detail
    assert "Status: ON" in reading.detail


async def test_garbage_and_an_undefined_exit_code_from_status_are_unknown(
    tmp_path: Path,
) -> None:
    agent = scripted_agent(tmp_path, "garbage-status")
    reading = await driver(agent).status(timeout=10)
    assert reading.state == "unknown"
    assert "exited 7" in reading.detail
    assert reading.raw_state == "exit 7"
    # The agent printed the password; the reading carries it masked.
    assert "***" in reading.detail
    no_secret(reading.detail, reading.source)
    off = await driver(agent).power_off(timeout=15)
    assert off.state == "unknown"
    assert not off.reset_sent
    assert "off" not in agent.actions()


async def test_wrong_credentials_are_no_proof_and_send_nothing(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "honest")
    wrong = "not-the-Pa55word"
    reading = await driver(agent, password=wrong).power_off(timeout=15)
    assert reading.state == "unknown"
    assert not reading.reset_sent
    assert "not sent" in reading.detail
    assert "Unable to obtain correct plug status" in reading.detail
    assert wrong not in reading.detail  # the agent echoed it; the driver masked it
    assert "off" not in agent.actions()
    assert agent.power == "on"


async def test_a_hanging_agent_is_killed_with_its_whole_session(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "hang")
    reading = await driver(agent).status(timeout=5)
    assert reading.state == "unknown"
    assert "did not finish in time; killed" in reading.detail
    (run,) = agent.runs()
    # Its own process group, not nodefence's, and nothing of it left behind.
    assert run["pgid"] == run["pid"] != os.getpgid(0)
    assert wait_until(lambda: process_gone(run["pid"]) and process_gone(run["helper"]))
    assert wait_until(lambda: not group_alive(run["pgid"]))
    # A helper that left the agent's group for one of its own goes with the agent's session.
    assert wait_until(lambda: process_gone(run["grouped_helper"]))


async def test_a_hanging_off_action_is_no_proof(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "hang")
    reading = await driver(agent).power_off(timeout=2)
    assert reading.state == "unknown"
    for run in agent.runs():
        assert wait_until(lambda run=run: process_gone(run["pid"]) and process_gone(run["helper"]))


async def test_a_missing_agent_is_no_proof(tmp_path: Path) -> None:
    gone = FenceAgentDriver(str(tmp_path / "fence_nowhere"), {"ip": "192.0.2.1"})
    reading = await gone.status(timeout=5)
    assert reading.state == "unknown"
    assert "cannot run" in reading.detail
    assert "No such file" in reading.detail


async def test_the_password_is_on_stdin_only_never_argv_or_environment(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, "wait")
    task = asyncio.create_task(driver(agent).status(timeout=30))
    assert await asyncio.to_thread(wait_until, lambda: bool(agent.runs()))
    (run,) = agent.runs()
    pid = run["pid"]
    # Read while it runs, as any process on the host could.
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    agent.release.touch()
    reading = await task
    assert reading.state == "on"
    assert run["password_ok"]  # it got the password, on stdin
    assert AGENT_PASSWORD.encode() not in cmdline
    assert AGENT_PASSWORD.encode() not in environ
    assert run["argv"] == [str(agent.path)]
    # A minimal environment: nothing of nodefence's own (tokens, kubeconfig) is passed on.
    assert set(run["env"]) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "PWD", "SHLVL", "_"}
    assert "password" in run["keys"]
    assert "action" in run["keys"]


async def test_concurrent_agents_are_bounded_process_wide(tmp_path: Path) -> None:
    from nodefence.fencing.drivers import fence_agent

    agent = scripted_agent(tmp_path, "wait")
    drivers = [driver(agent) for _ in range(fence_agent.DEFAULT_CONCURRENCY + 3)]
    tasks = [asyncio.create_task(d.status(timeout=30)) for d in drivers]
    started = await asyncio.to_thread(
        wait_until, lambda: len(agent.runs()) >= fence_agent.DEFAULT_CONCURRENCY
    )
    assert started
    # Give the others every chance to start too: none may while the first ones run.
    await asyncio.sleep(0.5)
    assert len(agent.runs()) == fence_agent.DEFAULT_CONCURRENCY
    agent.release.touch()
    readings = await asyncio.gather(*tasks)
    assert all(r.state == "on" for r in readings)
    assert len(agent.runs()) == len(drivers)


async def test_output_cut_inside_a_secret_shows_no_part_of_it(tmp_path: Path) -> None:
    """An agent prints 16 KiB, then its password: the read limit cuts the password, and the
    part before the cut (4, 13 or all but one of its characters) is masked like the whole."""
    agent = scripted_agent(tmp_path, "chatty")
    for keep in (4, 13, len(AGENT_PASSWORD) - 1):
        parameters = {**driver(agent).parameters, "keep": str(keep)}
        chatty = FenceAgentDriver(str(agent.path), parameters)
        loop = asyncio.get_running_loop()
        run = await chatty.run("status", loop.time() + 15)
        assert run.truncated
        reading = await chatty.status(timeout=15)
        assert reading.state == "unknown"
        for text in (run.output, run.text, reading.detail):
            assert AGENT_PASSWORD[:keep] not in text, (keep, text[-80:])
        assert run.output.endswith("***"), run.output[-80:]
