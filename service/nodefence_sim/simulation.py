"""The simulated cluster: store, simulated kubelets and controllers, and their settings."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodefence_sim.controllers.kubelet import NOT_READY_REASON, KubeletFleet
from nodefence_sim.controllers.taint_eviction import default_toleration_seconds
from nodefence_sim.managed import CONTROLLER_MANAGER, KUBELET, SCENARIO_LOADER
from nodefence_sim.priority import bootstrap_system_priority_classes, priority_admission
from nodefence_sim.resources import LEASES, NAMESPACES, NODES, PODS, ResourceType
from nodefence_sim.store import Obj, Store, WatchEvent, rfc3339, utcnow
from nodefence_sim.wakeup import significant

NODE_OUT_OF_SERVICE_VOLUME_DETACH = "NodeOutOfServiceVolumeDetach"
ORDERED_NAMESPACE_DELETION = "OrderedNamespaceDeletion"

# Gate -> (first minor version where it is on by default, first minor where it is locked on).
# NodeOutOfServiceVolumeDetach: alpha in 1.24, beta (on) in 1.26, GA (locked) in 1.28.
# OrderedNamespaceDeletion: beta (off) in 1.30, on in 1.33, GA (locked) in 1.34.
_GATE_DEFAULTS: dict[str, tuple[int, int]] = {
    NODE_OUT_OF_SERVICE_VOLUME_DETACH: (26, 28),
    ORDERED_NAMESPACE_DELETION: (33, 34),
}

SETTLE_ROUNDS = 30
# How long before its first Ready a scenario's node joined the cluster.
JOIN_SECONDS = 60.0
_INTEGER_SETTINGS = frozenset({"lease_duration_seconds", "pod_eviction_toleration_seconds"})


def parse_version(version: str) -> tuple[int, int, int]:
    """``"1.24.8"`` or ``"v1.28"`` -> (1, 24, 8); anything else is a configuration error."""
    parts = version.strip().removeprefix("v").split("-", 1)[0].split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"invalid Kubernetes version {version!r}; expected e.g. 1.24.8")
    numbers = [int(p) for p in parts] + [0]
    return numbers[0], numbers[1], numbers[2]


@dataclass
class SimSettings:
    """Periods and version of the simulated cluster (a scenario file may override them).

    The periods default to the real components' defaults except ``lease_renew_seconds`` (the
    kubelet renews every 10 s), kept short so that a recovered node looks fresh quickly.
    """

    k8s_version: str = "1.24.8"
    feature_gates: dict[str, bool] = field(default_factory=dict)
    lease_duration_seconds: int = 40
    lease_renew_seconds: float = 2.0
    node_monitor_grace_seconds: float = 40.0
    node_status_report_seconds: float = 60.0
    pod_eviction_toleration_seconds: int = 300
    orphan_pod_quarantine_seconds: float = 40.0
    force_detach_after_seconds: float | None = None
    # How long a scenario's nodes have been Ready when it starts: a cluster that has run for a
    # while, not one whose nodes all just came up together (``Simulation.have_run``).
    initial_uptime_seconds: float = 86400.0
    tick_seconds: float = 0.1

    def __post_init__(self) -> None:
        _, minor, _ = parse_version(self.k8s_version)
        for gate, enabled in self.feature_gates.items():
            locked = _GATE_DEFAULTS.get(gate, (0, 10**6))[1]
            if not enabled and minor >= locked:
                raise ValueError(
                    f"feature gate {gate} is GA and locked on in Kubernetes {self.k8s_version}"
                )

    @property
    def version(self) -> tuple[int, int, int]:
        return parse_version(self.k8s_version)

    def gate_enabled(self, gate: str) -> bool:
        """An explicit setting wins; otherwise the gate's default for the simulated version."""
        if gate in self.feature_gates:
            return bool(self.feature_gates[gate])
        on_from = _GATE_DEFAULTS.get(gate)
        return on_from is not None and self.version[1] >= on_from[0]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SimSettings:
        """Settings from a scenario's ``simulation:`` section; unknown keys are rejected so that
        a typo does not silently run a different cluster."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown simulation settings: {', '.join(unknown)}")
        data: dict[str, Any] = {}
        for key, value in values.items():
            if key == "k8s_version":
                data[key] = str(value).removeprefix("v")
            elif key == "feature_gates":
                if not isinstance(value, Mapping) or not all(
                    isinstance(v, bool) for v in value.values()
                ):
                    raise ValueError("feature_gates must map gate names to true or false")
                data[key] = {str(k): v for k, v in value.items()}
            elif value is None and key == "force_detach_after_seconds":
                data[key] = None
            else:
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise ValueError(f"{key} must be a non-negative number, not {value!r}")
                data[key] = int(value) if key in _INTEGER_SETTINGS else float(value)
        return cls(**data)


def _creator(rt: ResourceType, obj: Obj) -> str:
    """Who creates such an object in a real cluster: a kubelet registers its Node and Lease,
    controllers create owned pods, an administrator applies the rest."""
    if rt.key in (NODES.key, LEASES.key):
        return KUBELET
    if rt.key == PODS.key and obj["metadata"].get("ownerReferences"):
        return CONTROLLER_MANAGER
    return SCENARIO_LOADER


class Controller(Protocol):
    """A level-triggered control loop: look at the store, move it one step toward the desired
    state. Called on every tick and after store changes, so it must be idempotent and cheap."""

    def reconcile(self, now: datetime) -> None: ...


class Simulation:
    """Owns the store and the simulated control loops; the HTTP server serves its store.

    ``clock`` replaces the wall clock (tests advance a fake one instead of waiting).
    """

    def __init__(
        self,
        settings: SimSettings | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings or SimSettings()
        self.store = Store(now=clock or utcnow)
        self.store.add_admission(default_toleration_seconds(self.settings))
        self.store.add_admission(priority_admission(self.store))
        self.kubelets = KubeletFleet(self)
        self.controllers: list[Controller] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.store.add_listener(self._on_change)

    @classmethod
    def from_scenario(
        cls,
        name_or_path: str = "seed",
        *,
        k8s_version: str | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> Simulation:
        """A running-ready cluster: the scenario's objects, every controller, one settled pass
        (nodes Ready with fresh leases, workloads' pods created and started)."""
        from nodefence_sim.controllers.registry import all_controllers
        from nodefence_sim.scenario import load_scenario

        scenario = load_scenario(name_or_path)
        values = dict(scenario.settings)
        if k8s_version is not None:
            values["k8s_version"] = k8s_version
        sim = cls(SimSettings.from_mapping(values), clock=clock)
        sim.controllers.extend(all_controllers(sim))
        bootstrap_system_priority_classes(sim.store)
        sim.load_objects(scenario.objects)
        sim.settle()
        if sim.settings.initial_uptime_seconds > 0:
            sim.have_run()
            sim.settle()
        return sim

    def have_run(self) -> None:
        """Every node has been Ready for ``initial_uptime_seconds``, and was created (joined)
        a minute before that: a real API server never shows a Node Ready since before it was
        created, and a node's first Ready after joining is no recovery (nodefence's storm
        cooldown tells one from the other by the two)."""
        uptime = self.settings.initial_uptime_seconds
        joined = self.store.now() - timedelta(seconds=uptime + JOIN_SECONDS)
        for node in self.store.items(NODES):
            # Stored objects are not written through the API here: the scenario's cluster
            # existed before the simulator started serving it.
            node["metadata"]["creationTimestamp"] = rfc3339(joined)
            self.kubelets.up(str(node["metadata"]["name"]), uptime)

    @property
    def git_version(self) -> str:
        return f"v{self.settings.k8s_version}"

    def load_objects(self, objects: Iterable[Obj]) -> list[Obj]:
        """Create objects in dependency order (namespaces, nodes, leases, storage, workloads,
        pods), so that every controller sees a consistent cluster on its first pass, each as
        the component that would have created it."""
        from nodefence_sim.api.defaults import workload_defaults
        from nodefence_sim.scenario import creation_order

        created: list[Obj] = []
        for rt, given in creation_order(objects):
            name = given["metadata"].get("name")
            if rt.key == NAMESPACES.key and self.store.peek(rt, None, name) is not None:
                continue
            obj = workload_defaults(rt, given)
            created.append(
                self.store.create(
                    rt, obj["metadata"].get("namespace"), obj, manager=_creator(rt, obj)
                )
            )
        return created

    def _on_change(self, event: WatchEvent) -> None:
        """A significant change runs the controllers at once; a Lease renewal or a heartbeat
        waits for the next tick, which is soon enough for the timers that read them."""
        if significant(event):
            self._wake.set()

    def step(self) -> None:
        """Run every controller once (tests call this to advance deterministically)."""
        now = self.store.now()
        for controller in self.controllers:
            controller.reconcile(now)

    def settle(self, max_rounds: int = SETTLE_ROUNDS) -> int:
        """Step until a pass changes nothing (or ``max_rounds``); returns the passes run."""
        for rounds in range(1, max_rounds + 1):
            before = self.store.resource_version
            self.step()
            if self.store.resource_version == before:
                return rounds
        return max_rounds

    # ------------------------------------------------------------ control API
    def node_down(self, name: str, since_seconds: float = 0) -> dict[str, Any]:
        """Stop the node's kubelet as if it died ``since_seconds`` ago; the controllers derive
        the backdated consequences (NotReady, taints, evictions) on the next passes."""
        self.kubelets.down(name, since_seconds)
        self.settle()
        return self.node_state(name)

    def power_off(self, name: str) -> dict[str, Any]:
        """The machine loses power: here, its kubelet stops (a simulated node runs nothing
        else)."""
        if self.node_state(name)["kubelet"] == "up":
            self.node_down(name)
        return self.node_state(name)

    def node_up(self, name: str, since_seconds: float = 0, reboot: bool = False) -> dict[str, Any]:
        """Bring the kubelet back, Ready since ``since_seconds`` ago; ``reboot`` gives the node a
        new bootID and a kubelet without containers."""
        self.kubelets.up(name, since_seconds, reboot=reboot)
        self.settle()
        return self.node_state(name)

    def node_not_ready(
        self, name: str, since_seconds: float = 0, reason: str = NOT_READY_REASON
    ) -> dict[str, Any]:
        """Keep the node's kubelet alive (Lease renewed, status posted) but reporting
        Ready=False for ``reason`` since ``since_seconds`` ago; its pods keep running, marked
        not ready, and the controllers react as to a NotReady node (taints, evictions that
        the kubelet cannot carry out). ``node_up`` ends it."""
        self.kubelets.not_ready(name, since_seconds, reason=reason)
        self.settle()
        return self.node_state(name)

    def node_clock(self, name: str, skew_seconds: float) -> dict[str, Any]:
        """Set how far the node's kubelet clock is off the API server's (0 resets it)."""
        self.kubelets.set_clock(name, skew_seconds)
        self.settle()
        return self.node_state(name)

    def recreate_node(self, name: str) -> dict[str, Any]:
        """Delete the Node and register it again under the same name: a new UID, the labels and
        pod CIDR it registers with, nothing else (no taints, no annotations)."""
        self.kubelets.recreate(name)
        self.settle()
        return self.node_state(name)

    def node_state(self, name: str) -> dict[str, Any]:
        return self.kubelets.state(name)

    def node_states(self) -> list[dict[str, Any]]:
        names = sorted(str(n["metadata"]["name"]) for n in self.store.items(NODES))
        return [self.kubelets.state(n) for n in names]

    # ------------------------------------------------------------- event loop
    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self.step()
            # asyncio.wait, not wait_for: on Python 3.11 wait_for can swallow a cancellation
            # that arrives as the wake-up does, and the loop would then never stop.
            woken = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({woken}, timeout=self.settings.tick_seconds)
            finally:
                woken.cancel()

    async def start(self) -> None:
        """Start the simulated kubelets and controllers."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="simulation")

    async def stop(self) -> None:
        """Stop every background loop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.store.close_watches()
