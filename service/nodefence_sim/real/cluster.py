"""The real cluster behind the control surface and the BMCs: the same node operations as the
simulator's ``Simulation``, carried out on real processes and real objects.

- ``node_down``: SIGKILL that node's kwok. Nothing is written: the Lease stops being renewed and
  the node-lifecycle controller marks the node Unknown after its grace period, as for a kubelet
  that hangs or a machine that loses power.
- ``node_up``: start the node's kwok again; with ``reboot`` first give the node a new bootID
  (through the status subresource, as a kubelet reports one after a boot).
- ``recreate_node``: delete the Node and register it again from the scenario (a new UID).

A large cluster's nodes share one kwok (``shared``, ``loader.load_shared``): there a node's
kubelet dies when the node loses that kwok's label (kwok lets go of it: its Lease is no longer
renewed; a status report kwok had queued for it on a busy machine may still go out once) and
comes back when the label does.

On a node run by a real kubelet (``--real-nodes``), ``node_down`` SIGKILLs the kubelet alone: the
machine, containerd and every container run on, writing to their volumes, which is what a
partition or a hung kubelet looks like and why the power-off proof exists. ``power_off`` (the
BMC's ``ForceOff``) kills the whole machine; ``node_up`` with ``reboot`` powers it on again with a
new boot ID, which the kubelet reports itself.

The simulator backdates with ``sinceSeconds``; real controllers stamp their own times, so the
control surface refuses that here instead of pretending.
"""

from __future__ import annotations

import uuid
from typing import Any

from nodefence_sim.errors import ApiError
from nodefence_sim.real.components import KUBELET_LABEL, KUBELET_UP, ControlPlane
from nodefence_sim.real.loader import Loaded, node_manifest, wait_for
from nodefence_sim.real.machines import Machine, RealMachines
from nodefence_sim.real.rest import Rest

NODE_GONE_TIMEOUT = 60.0


class RealCluster:
    def __init__(
        self,
        plane: ControlPlane,
        rest: Rest,
        loaded: Loaded,
        *,
        shared: bool = False,
        machines: RealMachines | None = None,
    ) -> None:
        self.plane = plane
        self.rest = rest
        self.loaded = loaded
        self.shared = shared
        self.machines = machines

    def _machine(self, name: str) -> Machine | None:
        """The real machine behind ``name``, or None for a kwok node."""
        return self.machines.machines.get(name) if self.machines is not None else None

    def _node(self, name: str) -> dict[str, Any]:
        """The live Node; an unknown name raises the API server's own 404 as ``ApiError``."""
        return self.rest.get(f"/api/v1/nodes/{name}")

    def node_state(self, name: str) -> dict[str, Any]:
        return self._state(self._node(name))

    def node_states(self) -> list[dict[str, Any]]:
        items = self.rest.get("/api/v1/nodes").get("items") or []
        return [self._state(n) for n in sorted(items, key=lambda n: n["metadata"]["name"])]

    def _state(self, node: dict[str, Any]) -> dict[str, Any]:
        name = str(node["metadata"]["name"])
        ready: dict[str, Any] = next(
            (c for c in node.get("status", {}).get("conditions") or [] if c["type"] == "Ready"),
            {},
        )
        try:
            lease = self.rest.get(
                f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
            )
        except ApiError as exc:
            if exc.code != 404:
                raise
            lease = {}
        return {
            "name": name,
            "uid": node["metadata"]["uid"],
            "kubelet": "up" if self._kubelet_up(node) else "down",
            "real": self._machine(name) is not None,
            "clockSkewSeconds": 0.0,
            "bootID": node.get("status", {}).get("nodeInfo", {}).get("bootID"),
            "ready": ready.get("status"),
            "readyReason": ready.get("reason"),
            "readySince": ready.get("lastTransitionTime"),
            "readyMessage": ready.get("message"),
            "leaseRenewTime": lease.get("spec", {}).get("renewTime"),
            "unschedulable": bool(node.get("spec", {}).get("unschedulable")),
            "taints": node.get("spec", {}).get("taints") or [],
        }

    def _kubelet_up(self, node: dict[str, Any]) -> bool:
        name = str(node["metadata"]["name"])
        machine = self._machine(name)
        if machine is not None:
            return machine.kubelet_running()
        if self.shared:
            return (node["metadata"].get("labels") or {}).get(KUBELET_LABEL) == KUBELET_UP
        return self.plane.kwok_running(name)

    def node_down(self, name: str) -> dict[str, Any]:
        self._node(name)
        machine = self._machine(name)
        if machine is not None:
            machine.kill_kubelet()
        else:
            self._stop_kwok(name)
        return self.node_state(name)

    def power_off(self, name: str) -> dict[str, Any]:
        self._node(name)
        machine = self._machine(name)
        if machine is not None:
            machine.power_off()
        else:
            self._stop_kwok(name)
        return self.node_state(name)

    def node_up(self, name: str, *, reboot: bool = False) -> dict[str, Any]:
        self._node(name)
        machine = self._machine(name)
        if machine is not None:
            if reboot:
                machine.power_off()
            machine.power_on()
            machine.start_kubelet()
            return self.node_state(name)
        if reboot:
            self._stop_kwok(name)
            self.rest.merge_patch(
                f"/api/v1/nodes/{name}/status",
                {"status": {"nodeInfo": {"bootID": str(uuid.uuid4())}}},
            )
        self._start_kwok(name)
        return self.node_state(name)

    def recreate_node(self, name: str) -> dict[str, Any]:
        self._node(name)
        if self._machine(name) is not None:
            raise ApiError(
                409,
                "Conflict",
                f"node {name} is run by a real kubelet, which "
                "registers its Node itself; restart it with up instead",
            )
        if name not in self.loaded.nodes:
            raise ApiError(409, "Conflict", f"node {name} is not one of the scenario's nodes")
        self._stop_kwok(name)
        self.rest.delete(f"/api/v1/nodes/{name}")

        def gone() -> bool:
            try:
                self._node(name)
            except ApiError as exc:
                if exc.code == 404:
                    return True
                raise
            return False

        wait_for(gone, NODE_GONE_TIMEOUT, f"node {name} deleted")
        manifest = node_manifest(self.loaded.nodes[name])
        self.rest.post("/api/v1/nodes", manifest)
        self._start_kwok(name)
        return self.node_state(name)

    def _start_kwok(self, name: str) -> None:
        if self.shared:
            self._label(name, KUBELET_UP)
            return
        cidr, node_ip = self.loaded.kwok[name]
        self.plane.start_kwok(name, cidr, node_ip)

    def _stop_kwok(self, name: str) -> None:
        if self.shared:
            self._label(name, None)
        else:
            self.plane.kill_kwok(name)

    def _label(self, name: str, value: str | None) -> None:
        self.rest.merge_patch(
            f"/api/v1/nodes/{name}", {"metadata": {"labels": {KUBELET_LABEL: value}}}
        )
