"""Off request to proof: the native Redfish driver against fence_redfish, on the same BMC.

``python -m bench.fence_agent_proof [--rounds N]``: the simulator's Redfish BMC (which powers a
machine off at once, so the figure is the driver's own cost), behind one TLS front, powered off
by each driver in turn and read back Off; the machine is powered on again between rounds,
untimed. Prints each driver's median and the ratio; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import time

from nodefence.fencing.drivers.fence_agent import FenceAgentDriver
from nodefence.fencing.drivers.redfish import RedfishDriver
from nodefence.fencing.model import PowerDriver
from nodefence_sim.demo.tls_front import tls_front
from nodefence_sim.redfish import bmcs_of
from nodefence_sim.simulation import Simulation
from nodefence_sim.testing import running_simulator

NODE = "compute01"
AGENT_PATH = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
TIMEOUT = 60.0


async def _time_off(driver: PowerDriver) -> float:
    started = time.perf_counter()
    reading = await driver.power_off(TIMEOUT)
    elapsed = time.perf_counter() - started
    if reading.state != "off":
        raise RuntimeError(f"no proof: {reading.detail}")
    on = await driver.power_on(TIMEOUT)
    if on.state != "on":
        raise RuntimeError(f"not back on: {on.detail}")
    return elapsed


async def measure(rounds: int) -> dict[str, list[float]]:
    agent = shutil.which("fence_redfish", path=AGENT_PATH)
    if agent is None:
        raise SystemExit("fence_redfish is not installed (Debian package fence-agents)")
    sim = Simulation.from_scenario("seed")
    async with running_simulator(sim) as cluster:
        port = int(cluster.url.rsplit(":", 1)[1])
        bmcs = bmcs_of(sim)
        async with tls_front(port) as front:
            native = RedfishDriver(
                f"https://127.0.0.1:{front}",
                username=bmcs.username,
                password=bmcs.password,
                system=f"/redfish/v1/Systems/{NODE}",
                insecure=True,
                poll_interval=0.2,
            )
            fence = FenceAgentDriver(
                agent,
                {
                    "ip": "127.0.0.1",
                    "ipport": str(front),
                    "username": bmcs.username,
                    "password": bmcs.password,
                    "ssl_insecure": "1",
                    "systems_uri": f"/redfish/v1/Systems/{NODE}",
                },
                poll_interval=0.2,
            )
            times: dict[str, list[float]] = {"redfish (native)": [], "fence_redfish": []}
            try:
                for _ in range(rounds):
                    times["redfish (native)"].append(await _time_off(native))
                    times["fence_redfish"].append(await _time_off(fence))
            finally:
                await native.close()
                await fence.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fence_agent_proof")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times = asyncio.run(measure(max(1, args.rounds)))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:<18} median {medians[name]:.3f}s  ({shown})")
    ratio = medians["fence_redfish"] / medians["redfish (native)"]
    print(f"fence_redfish / native: {ratio:.1f}x (off request to proof, same BMC, same TLS front)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
