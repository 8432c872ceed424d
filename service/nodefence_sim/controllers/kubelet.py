"""The simulated kubelets: one per Node, each renewing its Lease, posting node status and running
the pods bound to its node.

Everything the seed runbook is about follows from one fact: a dead kubelet does nothing. It stops
renewing its Lease (so the node lifecycle controller marks the node NotReady and taints it) and it
never confirms a pod deletion (so evicted pods stay ``Terminating`` until someone force-deletes
them). A live kubelet confirms deletions quickly and restarts its containers after a reboot.

A kubelet can also be alive and NotReady (container runtime down, CNI or PLEG trouble): it keeps
renewing its Lease and posting status, Ready=False, but it syncs no pod. Its containers keep
running and writing to their volumes, and it cannot stop them, so an evicted pod stays
``Terminating`` exactly as on a dead node, while the Lease says the node is alive.
"""

from __future__ import annotations

import hashlib
import ipaddress
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from nodefence_sim.errors import ApiError, conflict, not_found
from nodefence_sim.managed import KUBELET
from nodefence_sim.resources import LEASES, NODES, PODS
from nodefence_sim.store import DeleteOptions, Obj, WatchEvent, clone, parse_time, rfc3339
from nodefence_sim.wakeup import Agenda

if TYPE_CHECKING:
    from nodefence_sim.simulation import Controller, Simulation

LEASE_NAMESPACE = "kube-node-lease"
VOLUME_BLOCKED_ANNOTATION = "sim.nodefence.io/volume-blocked"
TERMINAL_PHASES = ("Succeeded", "Failed")
CONFIRM_DELAY_SECONDS = 1
NOT_READY_REASON = "KubeletNotReady"
# The messages the real kubelet posts with a not-ready reason (its runtime-state errors).
_NOT_READY_MESSAGES = {
    "KubeletNotReady": "container runtime is down",
    "ContainerRuntimeDown": "container runtime is down",
    "NetworkPluginNotReady": (
        "container runtime network not ready: NetworkReady=false "
        "reason:NetworkPluginNotReady message:Network plugin returns error: "
        "cni plugin not initialized"
    ),
    "PLEGNotHealthy": "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s",
}

_KUBELET_CONDITIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def micro_time(moment: datetime) -> str:
    """``metav1.MicroTime`` as the kubelet writes a Lease's renewTime."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def system_uuid(name: str) -> str:
    """The SMBIOS system UUID of the machine behind node ``name``: fixed per machine, as on
    real hardware, so the kubelet's ``systemUUID`` and the machine's BMC agree on it."""
    return str(uuid.UUID(_digest("machine", name)[32:64])).upper()


def _node_number(name: str) -> int:
    return int(_digest("node", name)[:8], 16)


def node_internal_ip(node: Mapping[str, Any]) -> str:
    for address in node.get("status", {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address["address"])
    number = _node_number(str(node["metadata"]["name"]))
    return f"192.168.{number % 250 + 1}.{(number >> 8) % 250 + 2}"


def node_pod_cidr(node: Mapping[str, Any]) -> ipaddress.IPv4Network:
    cidr = node.get("spec", {}).get("podCIDR")
    if cidr:
        return ipaddress.IPv4Network(cidr, strict=False)
    number = _node_number(str(node["metadata"]["name"]))
    return ipaddress.IPv4Network(f"10.244.{number % 250}.0/24")


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond  # type: ignore[no-any-return]
    return None


@dataclass
class Kubelet:
    """What a kubelet process holds in memory: whether it runs, the boot it runs in, and its
    own clock.

    ``skew`` is how far the machine's clock is off the API server's: everything the kubelet
    stamps (renewTime, heartbeats, transitions, pod times) is read from it, while its timers
    (when to renew, when to report) run on elapsed time, as a real kubelet's do. The other
    moments here are on the API server's clock. ``not_ready`` is the reason a running kubelet
    reports Ready=False (``None``: it is healthy).
    """

    node: str
    uid: str
    up: bool = True
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    restart_pending: bool = False
    ready_since: datetime | None = None
    not_ready: str | None = None
    skew: timedelta = timedelta(0)
    died_at: datetime | None = None
    last_renewed: datetime | None = None
    last_reported: datetime | None = None
    # The Node's resourceVersion when this kubelet last compared it with what it reports.
    posted_rv: str | None = None

    def clock(self, server_moment: datetime) -> datetime:
        """What this kubelet's clock reads at ``server_moment``."""
        return server_moment + self.skew


class KubeletFleet:
    """All simulated kubelets, as one controller (one pass over the pods serves every node)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._kubelets: dict[str, Kubelet] = {}
        # Pod uid -> (resourceVersion, host IP) last found in the state this kubelet wants:
        # an unchanged pod is not rebuilt on every pass.
        self._in_sync: dict[str, tuple[str, str]] = {}
        # A kubelet acts when its Node, Lease or pods change, or when its renewal or report
        # timer runs out; an idle cluster of thousands of nodes costs the few that are due.
        self._agenda = Agenda()
        self._started = False
        sim.store.add_listener(self._heard)

    def _heard(self, event: WatchEvent) -> None:
        obj = event.object
        if event.resource.key == PODS.key:
            node = obj.get("spec", {}).get("nodeName")
            if node:
                self._agenda.mark(str(node))
            if event.type == "DELETED":
                self._in_sync.pop(str(obj["metadata"]["uid"]), None)
        elif event.resource.key == NODES.key or (
            event.resource.key == LEASES.key and obj["metadata"].get("namespace") == LEASE_NAMESPACE
        ):
            self._agenda.mark(str(obj["metadata"]["name"]))

    # ------------------------------------------------------------ bookkeeping
    def _kubelet_for(self, node: Mapping[str, Any]) -> Kubelet:
        meta = node["metadata"]
        name, uid = str(meta["name"]), str(meta["uid"])
        current = self._kubelets.get(name)
        if current is not None and current.uid == uid:
            return current
        kubelet = Kubelet(name, uid)
        boot_id = node.get("status", {}).get("nodeInfo", {}).get("bootID")
        if current is None and boot_id:
            kubelet.boot_id = str(boot_id)
        self._kubelets[name] = kubelet
        return kubelet

    def _node(self, name: str) -> Obj:
        node = self.sim.store.peek(NODES, None, name)
        if node is None:
            raise not_found(NODES.plural, name)
        return node

    # ---------------------------------------------------------------- control
    def down(self, name: str, since_seconds: float = 0) -> None:
        """The kubelet stops; its last Lease renewal and status post were ``since_seconds`` ago.

        A kubelet dies once: taking down one that is already down keeps its death, or moves it
        further back, never forward (a dead kubelet renews nothing). Its last renewal is
        written as the server recorded it then, so the Lease's managedFields time is the
        moment of death too.
        """
        _check_since(since_seconds)
        node = self._node(name)
        kubelet = self._kubelet_for(node)
        moment = self.sim.store.now() - timedelta(seconds=since_seconds)
        if not kubelet.up and kubelet.died_at is not None:
            moment = min(moment, kubelet.died_at)
        kubelet.up = False
        kubelet.ready_since = None
        kubelet.died_at = moment
        self._write_lease(node, kubelet, moment, force=True, written_at=moment)
        last_post = kubelet.clock(moment)
        new = clone(node)
        for cond in new.get("status", {}).get("conditions") or []:
            heartbeat = parse_time(cond.get("lastHeartbeatTime"))
            if heartbeat is None or heartbeat > last_post:
                cond["lastHeartbeatTime"] = rfc3339(last_post)
        self._update_node(new, written_at=moment)

    def up(self, name: str, since_seconds: float = 0, *, reboot: bool = False) -> None:
        """The kubelet is back and Ready since ``since_seconds`` ago, but never since before
        it died (it cannot have been Ready while dead); a reboot brings a new bootID and loses
        every container (running pods restart)."""
        _check_since(since_seconds)
        node = self._node(name)
        kubelet = self._kubelet_for(node)
        ready = condition(node, "Ready")
        already_ready = kubelet.up and ready is not None and ready.get("status") == "True"
        now = self.sim.store.now()
        if not already_ready or since_seconds > 0 or reboot:
            since = now - timedelta(seconds=since_seconds)
            if not kubelet.up and kubelet.died_at is not None:
                since = max(since, kubelet.died_at)
            kubelet.ready_since = since
        kubelet.up = True
        kubelet.not_ready = None
        kubelet.died_at = None
        kubelet.last_renewed = None
        kubelet.last_reported = None
        if reboot:
            kubelet.boot_id = str(uuid.uuid4())
            kubelet.restart_pending = True
        # The post that made it Ready is the one the server recorded when it came back.
        self._write_lease(node, kubelet, now, force=False)
        self._post_status(node, kubelet, now, written_at=kubelet.ready_since)

    def not_ready(
        self, name: str, since_seconds: float = 0, *, reason: str = NOT_READY_REASON
    ) -> None:
        """The kubelet runs but reports Ready=False for ``reason`` since ``since_seconds`` ago
        (never since before it died, if it was down): it keeps renewing its Lease and posting
        status, and stops syncing pods. The post that turned it NotReady is recorded by the
        server at that moment, so the controllers date their reaction (the not-ready taints)
        from it. Already NotReady, it keeps its transition unless ``since_seconds`` moves it
        further back."""
        _check_since(since_seconds)
        node = self._node(name)
        kubelet = self._kubelet_for(node)
        now = self.sim.store.now()
        since = now - timedelta(seconds=since_seconds)
        if not kubelet.up and kubelet.died_at is not None:
            since = max(since, kubelet.died_at)
        pending: datetime | None = since
        previous = parse_time((condition(node, "Ready") or {}).get("lastTransitionTime"))
        still_not_ready = kubelet.up and kubelet.not_ready is not None and previous is not None
        # Compared with the transition it posted, on the server's clock.
        if still_not_ready and previous is not None and since >= previous - kubelet.skew:
            pending = None
        kubelet.up = True
        kubelet.died_at = None
        kubelet.not_ready = reason
        kubelet.ready_since = pending
        kubelet.last_renewed = None
        kubelet.last_reported = None
        self._write_lease(node, kubelet, now, force=False)
        self._post_status(node, kubelet, now, written_at=pending)

    def set_clock(self, name: str, skew_seconds: float) -> None:
        """From now on the node's kubelet reads a clock ``skew_seconds`` off the server's (0:
        right again); the next renewal and status post carry it."""
        kubelet = self._kubelet_for(self._node(name))
        kubelet.skew = timedelta(seconds=skew_seconds)
        kubelet.last_renewed = None
        kubelet.last_reported = None
        self._agenda.mark(name)

    def recreate(self, name: str) -> None:
        """Delete the Node and register it anew under the same name (new UID): it keeps what a
        kubelet registers with (labels, pod CIDR) and loses taints, annotations and status."""
        store = self.sim.store
        old = store.get(NODES, None, name)
        _, removed = store.delete(NODES, None, name, DeleteOptions(grace_period_seconds=0))
        if not removed:
            raise conflict(NODES.plural, name, "the node is held by finalizers")
        spec = {
            key: old["spec"][key]
            for key in ("podCIDR", "podCIDRs", "providerID")
            if key in old.get("spec", {})
        }
        addresses = old.get("status", {}).get("addresses")
        fresh: Obj = {
            "metadata": {"name": name, "labels": dict(old["metadata"].get("labels") or {})},
            "spec": spec,
        }
        if addresses:
            fresh["status"] = {"addresses": addresses}
        node = store.create(NODES, None, fresh, manager=KUBELET)
        self._kubelets.pop(name, None)
        kubelet = self._kubelet_for(node)
        kubelet.ready_since = store.now()
        self._sync_node(store.peek(NODES, None, name) or node, kubelet, store.now())

    def spread_timers(self) -> None:
        """Spread the kubelets' renewals and status reports evenly over their periods, as on a
        cluster whose nodes did not all start in the same instant: a large simulated cluster
        built at once would otherwise renew every Lease in the same tick."""
        settings = self.sim.settings
        names = sorted(self._kubelets)
        for index, name in enumerate(names):
            kubelet = self._kubelets[name]
            share = index / len(names)
            if kubelet.last_renewed is not None:
                kubelet.last_renewed -= timedelta(seconds=share * settings.lease_renew_seconds)
            if kubelet.last_reported is not None:
                kubelet.last_reported -= timedelta(
                    seconds=share * settings.node_status_report_seconds
                )
            if kubelet.up:
                now = self.sim.store.now()
                pods = self.sim.store.pods_on(name)
                self._agenda.visited(name, self._next_visit(kubelet, pods, now))

    def state(self, name: str) -> dict[str, Any]:
        """The node as the control surface reports it."""
        node = self._node(name)
        kubelet = self._kubelet_for(node)
        ready = condition(node, "Ready") or {}
        lease = self.sim.store.peek(LEASES, LEASE_NAMESPACE, name)
        return {
            "name": name,
            "uid": node["metadata"]["uid"],
            "kubelet": "up" if kubelet.up else "down",
            "clockSkewSeconds": kubelet.skew.total_seconds(),
            "bootID": node.get("status", {}).get("nodeInfo", {}).get("bootID"),
            "ready": ready.get("status"),
            "readyReason": ready.get("reason"),
            "readySince": ready.get("lastTransitionTime"),
            "readyMessage": ready.get("message"),
            "leaseRenewTime": (lease or {}).get("spec", {}).get("renewTime"),
            "unschedulable": bool(node.get("spec", {}).get("unschedulable")),
            "taints": clone(node.get("spec", {}).get("taints") or []),
        }

    # -------------------------------------------------------------- reconcile
    def reconcile(self, now: datetime) -> None:
        store = self.sim.store
        if self._started:
            names = self._agenda.due(now)
        else:
            self._started = True
            names = sorted(str(n["metadata"]["name"]) for n in store.items(NODES))
        for name in names:
            node = store.peek(NODES, None, name)
            if node is None:
                self._kubelets.pop(name, None)
                self._agenda.forget(name)
                continue
            kubelet = self._kubelet_for(node)
            if not kubelet.up:
                self._agenda.forget(name)
                continue
            self._sync_node(node, kubelet, now)
            current = store.peek(NODES, None, name) or node
            pods = store.pods_on(name)
            self._run_pods(current, kubelet, pods, now)
            self._agenda.visited(name, self._next_visit(kubelet, pods, now))

    def _next_visit(self, kubelet: Kubelet, pods: list[Obj], now: datetime) -> datetime:
        """When this kubelet must act again if nothing changes: its next Lease renewal or
        status report, or the next pass while a pod of its is being deleted or a transition
        is pending."""
        if kubelet.ready_since is not None or any(
            p["metadata"].get("deletionTimestamp") for p in pods
        ):
            return now
        settings = self.sim.settings
        renew = (kubelet.last_renewed or now) + timedelta(seconds=settings.lease_renew_seconds)
        report = (kubelet.last_reported or now) + timedelta(
            seconds=settings.node_status_report_seconds
        )
        return min(renew, report)

    def _sync_node(self, node: Obj, kubelet: Kubelet, now: datetime) -> None:
        """Renew the Lease when due, and post status when the report is due or the Node
        changed since the last post (a kubelet reposts what someone else overwrote)."""
        self._write_lease(node, kubelet, now, force=False)
        report_due = (
            kubelet.last_reported is None
            or (now - kubelet.last_reported).total_seconds()
            >= self.sim.settings.node_status_report_seconds
        )
        if (
            report_due
            or kubelet.ready_since is not None
            or kubelet.posted_rv != node["metadata"]["resourceVersion"]
        ):
            self._post_status(node, kubelet, now)
            posted = self.sim.store.peek(NODES, None, kubelet.node) or node
            kubelet.posted_rv = str(posted["metadata"]["resourceVersion"])

    # ----------------------------------------------------------------- lease
    def _write_lease(
        self,
        node: Mapping[str, Any],
        kubelet: Kubelet,
        moment: datetime,
        *,
        force: bool,
        written_at: datetime | None = None,
    ) -> None:
        """Renew the Lease at ``moment`` (server clock) when the renew period has elapsed,
        stamping renewTime from the kubelet's own clock."""
        store = self.sim.store
        name = str(node["metadata"]["name"])
        owner = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": name,
            "uid": node["metadata"]["uid"],
        }
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": self.sim.settings.lease_duration_seconds,
            "renewTime": micro_time(kubelet.clock(moment)),
        }
        renew = (
            force
            or kubelet.last_renewed is None
            or (moment - kubelet.last_renewed).total_seconds()
            >= self.sim.settings.lease_renew_seconds
        )
        lease = store.peek(LEASES, LEASE_NAMESPACE, name)
        try:
            if lease is None:
                store.create(
                    LEASES,
                    LEASE_NAMESPACE,
                    {
                        "metadata": {
                            "name": name,
                            "namespace": LEASE_NAMESPACE,
                            "ownerReferences": [owner],
                        },
                        "spec": spec,
                    },
                    manager=KUBELET,
                )
                kubelet.last_renewed = moment
                return
            old_spec = lease.get("spec", {})
            new = clone(lease)
            new["metadata"]["ownerReferences"] = [owner]
            new["spec"] = {**old_spec, **spec}
            if not renew:
                new["spec"]["renewTime"] = old_spec.get("renewTime")
            if new == lease:
                return
            store.update(
                LEASES,
                LEASE_NAMESPACE,
                name,
                new,
                subresource="all",
                check_rv=False,
                manager=KUBELET,
                written_at=written_at,
            )
        except ApiError:
            return
        if renew:
            kubelet.last_renewed = moment

    # ----------------------------------------------------------- node status
    def _post_status(
        self, node: Obj, kubelet: Kubelet, now: datetime, written_at: datetime | None = None
    ) -> None:
        settings = self.sim.settings
        new = clone(node)
        labels = new["metadata"].setdefault("labels", {})
        labels.setdefault("kubernetes.io/hostname", kubelet.node)
        labels.setdefault("kubernetes.io/os", "linux")
        labels.setdefault("kubernetes.io/arch", "amd64")
        status = new.setdefault("status", {})
        old_conditions = {c.get("type"): c for c in status.get("conditions") or []}
        stamp = rfc3339(kubelet.clock(now))
        transition = kubelet.clock(kubelet.ready_since or now)
        heartbeat_due = (
            kubelet.last_reported is None
            or (now - kubelet.last_reported).total_seconds() >= settings.node_status_report_seconds
        )
        conditions: list[dict[str, Any]] = []
        changed = False
        for kind, value, reason, message in _kubelet_conditions(kubelet):
            old = old_conditions.pop(kind, None) or {}
            # A pending transition moves every condition when the kubelet comes up, only Ready
            # when it turns NotReady (its runtime failing says nothing of memory or disks).
            moved = kubelet.ready_since is not None and (
                kubelet.not_ready is None or kind == "Ready"
            )
            same = old.get("status") == value and not moved
            wanted = {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": old.get("lastHeartbeatTime") or stamp,
                "lastTransitionTime": (old.get("lastTransitionTime") if same else None)
                or rfc3339(transition),
            }
            changed = changed or {k: v for k, v in old.items() if k != "lastHeartbeatTime"} != {
                k: v for k, v in wanted.items() if k != "lastHeartbeatTime"
            }
            conditions.append(wanted)
        if changed or heartbeat_due:
            kubelet.last_reported = now
            for cond in conditions:
                cond["lastHeartbeatTime"] = stamp
        status["conditions"] = conditions + list(old_conditions.values())
        status["nodeInfo"] = self._node_info(status.get("nodeInfo") or {}, kubelet)
        if not status.get("addresses"):
            status["addresses"] = [
                {"type": "InternalIP", "address": node_internal_ip(node)},
                {"type": "Hostname", "address": kubelet.node},
            ]
        resources = {
            "cpu": "16",
            "memory": "65842364Ki",
            "pods": "110",
            "ephemeral-storage": "100Gi",
        }
        status.setdefault("capacity", dict(resources))
        status.setdefault("allocatable", dict(resources))
        status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 10250}})
        kubelet.ready_since = None
        if new != node:
            self._update_node(new, written_at=written_at)

    def _node_info(self, old: Mapping[str, Any], kubelet: Kubelet) -> dict[str, Any]:
        version = f"v{self.sim.settings.k8s_version}"
        machine = _digest("machine", kubelet.node)
        info = {
            "architecture": "amd64",
            "bootID": kubelet.boot_id,
            "containerRuntimeVersion": "containerd://1.6.15",
            "kernelVersion": "5.15.0-91-generic",
            "kubeProxyVersion": version,
            "kubeletVersion": version,
            "machineID": machine[:32],
            "operatingSystem": "linux",
            "osImage": "Ubuntu 22.04.3 LTS",
            "systemUUID": system_uuid(kubelet.node),
        }
        return {**dict(old), **info, "machineID": old.get("machineID") or info["machineID"]}

    def _update_node(self, new: Obj, written_at: datetime | None = None) -> None:
        try:
            self.sim.store.update(
                NODES,
                None,
                new["metadata"]["name"],
                new,
                subresource="all",
                check_rv=False,
                manager=KUBELET,
                written_at=written_at,
            )
        except ApiError:
            return

    # ------------------------------------------------------------------ pods
    def _run_pods(self, node: Obj, kubelet: Kubelet, pods: list[Obj], now: datetime) -> None:
        """Start, report and stop the node's pods; a NotReady kubelet does none of it (its
        runtime does not answer), so its containers run on as they were."""
        if kubelet.not_ready is not None:
            return
        store = self.sim.store
        restart = kubelet.restart_pending
        kubelet.restart_pending = False
        used_ips = {
            str(p.get("status", {}).get("podIP"))
            for p in pods
            if p.get("status", {}).get("podIP") and not p["spec"].get("hostNetwork")
        }
        host_ip = node_internal_ip(node)
        local = kubelet.clock(now)
        for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                self._confirm_deletion(pod, now)
                continue
            if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
                continue
            uid = str(meta["uid"])
            if not restart and self._in_sync.get(uid) == (meta["resourceVersion"], host_ip):
                continue
            if (meta.get("annotations") or {}).get(VOLUME_BLOCKED_ANNOTATION) == "true" and (
                pod.get("status", {}).get("phase") != "Running"
            ):
                status = _blocked_status(pod, node, local)
            else:
                status = _running_status(pod, node, local, restart=restart, used_ips=used_ips)
            if status == pod.get("status"):
                self._in_sync[uid] = (meta["resourceVersion"], host_ip)
                continue
            new = clone(pod)
            new["status"] = status
            try:
                written = store.update(
                    PODS,
                    meta["namespace"],
                    meta["name"],
                    new,
                    subresource="status",
                    manager=KUBELET,
                )
            except ApiError:
                continue
            self._in_sync[uid] = (written["metadata"]["resourceVersion"], host_ip)

    def _confirm_deletion(self, pod: Obj, now: datetime) -> None:
        """The kubelet has stopped the containers: remove the pod for good (grace 0, with the
        UID precondition so a same-named replacement is never hit)."""
        meta = pod["metadata"]
        grace = int(meta.get("deletionGracePeriodSeconds") or 0)
        if grace == 0:
            return
        deadline = parse_time(meta["deletionTimestamp"])
        if deadline is None:
            return
        requested = deadline - timedelta(seconds=grace)
        if now < requested + timedelta(seconds=min(grace, CONFIRM_DELAY_SECONDS)):
            return
        self.sim.store.force_delete_pod(pod)


def _kubelet_conditions(kubelet: Kubelet) -> tuple[tuple[str, str, str, str], ...]:
    """The conditions the kubelet posts: all good, or Ready=False for its not-ready reason."""
    if kubelet.not_ready is None:
        return _KUBELET_CONDITIONS
    message = _NOT_READY_MESSAGES.get(
        kubelet.not_ready, f"kubelet is posting not ready status: {kubelet.not_ready}"
    )
    return (*_KUBELET_CONDITIONS[:-1], ("Ready", "False", kubelet.not_ready, message))


def _check_since(since_seconds: float) -> None:
    if since_seconds < 0:
        raise ValueError("sinceSeconds must not be negative")


def _pod_condition(
    old: Mapping[str, Any],
    kind: str,
    value: str,
    now: datetime,
    *,
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    previous: Mapping[str, Any] = next(
        (c for c in old.get("conditions") or [] if c.get("type") == kind), {}
    )
    wanted: dict[str, Any] = {"type": kind, "status": value}
    if reason:
        wanted["reason"] = reason
    if message:
        wanted["message"] = message
    same = previous.get("status") == value and previous.get("lastTransitionTime")
    wanted["lastTransitionTime"] = previous["lastTransitionTime"] if same else rfc3339(now)
    return wanted


def _conditions(old: Mapping[str, Any], wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kubelet's conditions, followed by the ones others own (DisruptionTarget...)."""
    mine = {c["type"] for c in wanted}
    return wanted + [clone(c) for c in old.get("conditions") or [] if c.get("type") not in mine]


def _qos(spec: Mapping[str, Any]) -> str:
    containers = list(spec.get("containers") or [])
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        r.get("limits")
        and set(r["limits"]) >= {"cpu", "memory"}
        and all(r.get("requests", r["limits"]).get(k) == v for k, v in r["limits"].items())
        for r in resources
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _image_id(image: str) -> str:
    return f"{image.split(':', 1)[0]}@sha256:{_digest('image', image)}"


def _host_fields(node: Mapping[str, Any]) -> dict[str, Any]:
    host_ip = node_internal_ip(node)
    return {"hostIP": host_ip, "hostIPs": [{"ip": host_ip}]}


def _running_status(
    pod: Obj, node: Obj, now: datetime, *, restart: bool, used_ips: set[str]
) -> dict[str, Any]:
    spec = pod["spec"]
    old: Mapping[str, Any] = pod.get("status") or {}
    uid = str(pod["metadata"]["uid"])
    stamp = rfc3339(now)
    host = _host_fields(node)
    pod_ip = old.get("podIP")
    if not pod_ip:
        if spec.get("hostNetwork"):
            pod_ip = host["hostIP"]
        else:
            network = node_pod_cidr(node)
            pod_ip = next(
                (str(ip) for ip in network.hosts() if str(ip) not in used_ips),
                str(network.network_address),
            )
            used_ips.add(pod_ip)
    old_statuses = {s.get("name"): s for s in old.get("containerStatuses") or []}
    container_statuses = []
    for container in spec.get("containers") or []:
        name = str(container["name"])
        previous = old_statuses.get(name) or {}
        running = (previous.get("state") or {}).get("running")
        count = int(previous.get("restartCount") or 0)
        entry: dict[str, Any] = {
            "name": name,
            "image": container.get("image", ""),
            "imageID": _image_id(str(container.get("image", ""))),
            "ready": True,
            "started": True,
            "restartCount": count,
        }
        if running and restart:
            entry["restartCount"] = count + 1
            entry["lastState"] = {
                "terminated": {
                    "exitCode": 255,
                    "reason": "Unknown",
                    "startedAt": running.get("startedAt"),
                    "finishedAt": stamp,
                    "containerID": previous.get("containerID"),
                }
            }
            running = None
        elif previous.get("lastState"):
            entry["lastState"] = clone(previous["lastState"])
        started_at = (running or {}).get("startedAt") or stamp
        entry["containerID"] = f"containerd://{_digest(uid, name, str(entry['restartCount']))}"
        entry["state"] = {"running": {"startedAt": started_at}}
        container_statuses.append(entry)
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": _conditions(
            old,
            [
                _pod_condition(old, "Initialized", "True", now),
                _pod_condition(old, "Ready", "True", now),
                _pod_condition(old, "ContainersReady", "True", now),
                _pod_condition(old, "PodScheduled", "True", now),
            ],
        ),
        **host,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": old.get("startTime") or stamp,
        "qosClass": old.get("qosClass") or _qos(spec),
        "containerStatuses": container_statuses,
    }
    init_containers = spec.get("initContainers") or []
    if init_containers:
        old_init = {s.get("name"): s for s in old.get("initContainerStatuses") or []}
        status["initContainerStatuses"] = [
            _completed_init(c, old_init.get(c["name"]) or {}, uid, stamp) for c in init_containers
        ]
    return status


def _completed_init(
    container: Mapping[str, Any], previous: Mapping[str, Any], uid: str, stamp: str
) -> dict[str, Any]:
    terminated = (previous.get("state") or {}).get("terminated")
    container_id = f"containerd://{_digest(uid, str(container['name']), 'init')}"
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": _image_id(str(container.get("image", ""))),
        "containerID": container_id,
        "ready": True,
        "started": False,
        "restartCount": int(previous.get("restartCount") or 0),
        "state": {
            "terminated": terminated
            or {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": stamp,
                "finishedAt": stamp,
                "containerID": container_id,
            }
        },
    }


def _waiting(container: Mapping[str, Any], reason: str) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": reason}},
    }


def _blocked_status(pod: Obj, node: Obj, now: datetime) -> dict[str, Any]:
    """A pod whose volumes are not attached yet: ``Init:0/N`` or ``ContainerCreating``."""
    spec = pod["spec"]
    old: Mapping[str, Any] = pod.get("status") or {}
    init_containers = list(spec.get("initContainers") or [])
    containers = list(spec.get("containers") or [])
    unready = ", ".join(str(c["name"]) for c in containers)
    if init_containers:
        pending = ", ".join(str(c["name"]) for c in init_containers)
        initialized = _pod_condition(
            old,
            "Initialized",
            "False",
            now,
            reason="ContainersNotInitialized",
            message=f"containers with incomplete status: [{pending}]",
        )
    else:
        initialized = _pod_condition(old, "Initialized", "True", now)
    not_ready = f"containers with unready status: [{unready}]"
    status: dict[str, Any] = {
        "phase": "Pending",
        "conditions": _conditions(
            old,
            [
                initialized,
                _pod_condition(
                    old, "Ready", "False", now, reason="ContainersNotReady", message=not_ready
                ),
                _pod_condition(
                    old,
                    "ContainersReady",
                    "False",
                    now,
                    reason="ContainersNotReady",
                    message=not_ready,
                ),
                _pod_condition(old, "PodScheduled", "True", now),
            ],
        ),
        **_host_fields(node),
        "startTime": old.get("startTime") or rfc3339(now),
        "qosClass": old.get("qosClass") or _qos(spec),
        "containerStatuses": [
            _waiting(c, "PodInitializing" if init_containers else "ContainerCreating")
            for c in containers
        ],
    }
    if init_containers:
        status["initContainerStatuses"] = [_waiting(c, "PodInitializing") for c in init_containers]
    return status


def controllers(sim: Simulation) -> list[Controller]:
    """The fleet lives on the simulation (the control surface drives it); register it."""
    return [sim.kubelets]
