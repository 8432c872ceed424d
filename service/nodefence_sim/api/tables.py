"""Server-side printing: the ``meta.k8s.io/v1`` Tables ``kubectl get`` renders.

kubectl prints whatever columns the server sends, so these mirror the real server's printers
(``pkg/printers/internalversion``) for the types an operator looks at while fencing a node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from nodefence_sim.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CONFIGMAPS,
    CRONJOBS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    LEASES,
    NAMESPACES,
    NETWORK_POLICIES,
    NODES,
    PDBS,
    PODS,
    PRIORITY_CLASSES,
    PVCS,
    PVS,
    REPLICASETS,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    STATEFULSETS,
    VOLUME_ATTACHMENTS,
    ResourceType,
)
from nodefence_sim.store import parse_time

Obj = dict[str, Any]
Column = tuple[str, str, int]  # name, type, priority (1: only with -o wide)
Printer = Callable[[Obj, datetime], list[Any]]

TABLE_MEDIA = "as=Table"

_NONE = "<none>"
_UNKNOWN = "<unknown>"


def wants_table(accept: str) -> bool:
    """True when the client asked for a Table first (kubectl get does; other clients do not)."""
    first = accept.split(",", 1)[0].replace(" ", "")
    return TABLE_MEDIA in first and "g=meta.k8s.io" in first


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``."""
    s = int(seconds)
    if s < -1:
        return _UNKNOWN
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        rest = days % 365
        return f"{days // 365}y{rest}d" if rest else f"{days // 365}y"
    return f"{hours // 24 // 365}y"


def age(value: str | None, now: datetime) -> str:
    moment = parse_time(value)
    if moment is None:
        return _UNKNOWN
    return human_duration((now - moment).total_seconds())


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.get("metadata", {})
    return meta


def _created(obj: Obj, now: datetime) -> str:
    return age(_meta(obj).get("creationTimestamp"), now)


# ------------------------------------------------------------------------ pods
def pod_status(pod: Obj) -> tuple[str, int, int]:
    """(STATUS, ready containers, restarts) as ``printPod`` computes them."""
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    reason = status.get("reason") or status.get("phase") or ""
    restarts = 0
    ready = 0
    initializing = False
    init_specs = spec.get("initContainers") or []
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(cs.get("restartCount", 0))
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting")
        if terminated is not None and int(terminated.get("exitCode", 0)) == 0:
            continue
        if terminated is not None:
            if terminated.get("reason"):
                reason = "Init:" + terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode', 0)}"
        elif waiting is not None and waiting.get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    if not initializing:
        restarts = 0
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount", 0))
            state = cs.get("state") or {}
            waiting = state.get("waiting")
            terminated = state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated is not None:
                if terminated.get("signal"):
                    reason = f"Signal:{terminated['signal']}"
                else:
                    reason = f"ExitCode:{terminated.get('exitCode', 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            conditions = status.get("conditions") or []
            pod_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
            )
            reason = "Running" if pod_ready else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason, ready, restarts


def _pod_row(pod: Obj, now: datetime) -> list[Any]:
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    reason, ready, restarts = pod_status(pod)
    gates = spec.get("readinessGates") or []
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        passing = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
        gates_cell = f"{passing}/{len(gates)}"
    else:
        gates_cell = _NONE
    return [
        _meta(pod)["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        str(restarts),
        _created(pod, now),
        status.get("podIP") or _NONE,
        spec.get("nodeName") or _NONE,
        status.get("nominatedNodeName") or _NONE,
        gates_cell,
    ]


# ----------------------------------------------------------------------- nodes
def node_status(node: Obj) -> str:
    parts: list[str] = []
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            parts.append("Ready" if cond.get("status") == "True" else "NotReady")
            break
    if not parts:
        parts.append("Unknown")
    if node.get("spec", {}).get("unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def node_roles(node: Obj) -> str:
    roles: set[str] = set()
    for key, value in (_meta(node).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            role = key.removeprefix("node-role.kubernetes.io/")
            if role:
                roles.add(role)
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) if roles else _NONE


def _address(node: Obj, kind: str) -> str:
    for addr in node.get("status", {}).get("addresses") or []:
        if addr.get("type") == kind:
            return str(addr.get("address", _NONE))
    return _NONE


def _node_row(node: Obj, now: datetime) -> list[Any]:
    info = node.get("status", {}).get("nodeInfo") or {}
    return [
        _meta(node)["name"],
        node_status(node),
        node_roles(node),
        _created(node, now),
        info.get("kubeletVersion", ""),
        _address(node, "InternalIP"),
        _address(node, "ExternalIP"),
        info.get("osImage") or _UNKNOWN,
        info.get("kernelVersion") or _UNKNOWN,
        info.get("containerRuntimeVersion") or _UNKNOWN,
    ]


# ---------------------------------------------------------------------- others
def _lease_row(lease: Obj, now: datetime) -> list[Any]:
    holder = lease.get("spec", {}).get("holderIdentity") or _NONE
    return [_meta(lease)["name"], holder, _created(lease, now)]


def _event_row(event: Obj, now: datetime) -> list[Any]:
    involved = event.get("involvedObject") or {}
    last = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or _meta(event).get("creationTimestamp")
    )
    first = event.get("firstTimestamp") or event.get("eventTime") or last
    source = event.get("source") or {}
    source_cell = source.get("component") or event.get("reportingComponent") or ""
    if source.get("host"):
        source_cell = f"{source_cell}, {source['host']}"
    obj_cell = f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"
    return [
        age(last, now),
        event.get("type", ""),
        event.get("reason", ""),
        obj_cell,
        event.get("message", ""),
        involved.get("fieldPath", ""),
        source_cell,
        age(first, now),
        str(event.get("count") or 1),
        _meta(event)["name"],
    ]


def _containers(obj: Obj) -> tuple[str, str]:
    containers = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    names = ",".join(str(c.get("name", "")) for c in containers)
    images = ",".join(str(c.get("image", "")) for c in containers)
    return names or _NONE, images or _NONE


def _selector(obj: Obj) -> str:
    return format_selector(obj.get("spec", {}).get("selector") or {}) or _NONE


def format_selector(selector: Obj) -> str:
    """``metav1.FormatLabelSelector`` without its ``<none>`` (empty: matches everything)."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op = str(expr.get("operator", "")).lower()
        key = expr.get("key", "")
        if op == "exists":
            parts.append(key)
        elif op == "doesnotexist":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key} {op} ({','.join(expr.get('values') or [])})")
    return ",".join(parts)


def _statefulset_row(obj: Obj, now: datetime) -> list[Any]:
    status = obj.get("status", {})
    names, images = _containers(obj)
    replicas = obj.get("spec", {}).get("replicas", 1)
    return [
        _meta(obj)["name"],
        f"{status.get('readyReplicas', 0)}/{replicas}",
        _created(obj, now),
        names,
        images,
    ]


def _deployment_row(obj: Obj, now: datetime) -> list[Any]:
    status = obj.get("status", {})
    names, images = _containers(obj)
    replicas = obj.get("spec", {}).get("replicas", 1)
    return [
        _meta(obj)["name"],
        f"{status.get('readyReplicas', 0)}/{replicas}",
        int(status.get("updatedReplicas", 0)),
        int(status.get("availableReplicas", 0)),
        _created(obj, now),
        names,
        images,
        _selector(obj),
    ]


def _replicaset_row(obj: Obj, now: datetime) -> list[Any]:
    status = obj.get("status", {})
    names, images = _containers(obj)
    return [
        _meta(obj)["name"],
        int(obj.get("spec", {}).get("replicas", 1)),
        int(status.get("replicas", 0)),
        int(status.get("readyReplicas", 0)),
        _created(obj, now),
        names,
        images,
        _selector(obj),
    ]


def _daemonset_row(obj: Obj, now: datetime) -> list[Any]:
    status = obj.get("status", {})
    names, images = _containers(obj)
    node_selector = obj.get("spec", {}).get("template", {}).get("spec", {}).get("nodeSelector")
    return [
        _meta(obj)["name"],
        int(status.get("desiredNumberScheduled", 0)),
        int(status.get("currentNumberScheduled", 0)),
        int(status.get("numberReady", 0)),
        int(status.get("updatedNumberScheduled", 0)),
        int(status.get("numberAvailable", 0)),
        ",".join(f"{k}={v}" for k, v in sorted((node_selector or {}).items())) or _NONE,
        _created(obj, now),
        names,
        images,
        _selector(obj),
    ]


def _namespace_row(obj: Obj, now: datetime) -> list[Any]:
    return [_meta(obj)["name"], obj.get("status", {}).get("phase", ""), _created(obj, now)]


def _configmap_row(obj: Obj, now: datetime) -> list[Any]:
    count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [_meta(obj)["name"], count, _created(obj, now)]


def _access_modes(modes: Sequence[str] | None) -> str:
    short = {
        "ReadWriteOnce": "RWO",
        "ReadOnlyMany": "ROX",
        "ReadWriteMany": "RWX",
        "ReadWriteOncePod": "RWOP",
    }
    return ",".join(short.get(m, m) for m in modes or [])


def _pvc_row(obj: Obj, now: datetime) -> list[Any]:
    spec = obj.get("spec", {})
    status = obj.get("status", {})
    capacity = (status.get("capacity") or {}).get("storage", "")
    return [
        _meta(obj)["name"],
        status.get("phase", ""),
        spec.get("volumeName", ""),
        capacity,
        _access_modes(status.get("accessModes")),
        spec.get("storageClassName", ""),
        _created(obj, now),
        spec.get("volumeMode", ""),
    ]


def _pv_row(obj: Obj, now: datetime) -> list[Any]:
    spec = obj.get("spec", {})
    status = obj.get("status", {})
    claim = spec.get("claimRef") or {}
    claim_cell = f"{claim.get('namespace')}/{claim.get('name')}" if claim else ""
    return [
        _meta(obj)["name"],
        (spec.get("capacity") or {}).get("storage", ""),
        _access_modes(spec.get("accessModes")),
        spec.get("persistentVolumeReclaimPolicy", ""),
        status.get("phase", ""),
        claim_cell,
        spec.get("storageClassName", ""),
        status.get("reason", ""),
        _created(obj, now),
        spec.get("volumeMode", ""),
    ]


def _volume_attachment_row(obj: Obj, now: datetime) -> list[Any]:
    spec = obj.get("spec", {})
    return [
        _meta(obj)["name"],
        spec.get("attacher", ""),
        (spec.get("source") or {}).get("persistentVolumeName", ""),
        spec.get("nodeName", ""),
        bool(obj.get("status", {}).get("attached", False)),
        _created(obj, now),
    ]


def _secret_row(obj: Obj, now: datetime) -> list[Any]:
    return [_meta(obj)["name"], obj.get("type", ""), len(obj.get("data") or {}), _created(obj, now)]


def _service_ports(spec: Obj) -> str:
    ports = []
    for port in spec.get("ports") or []:
        text = f"{port.get('port')}"
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        ports.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(ports) or _NONE


def _external_ip(obj: Obj) -> str:
    spec = obj.get("spec", {})
    kind = spec.get("type", "ClusterIP")
    external = list(spec.get("externalIPs") or [])
    if kind == "ExternalName":
        return str(spec.get("externalName", ""))
    if kind == "LoadBalancer":
        ingress = obj.get("status", {}).get("loadBalancer", {}).get("ingress") or []
        found = [i.get("ip") or i.get("hostname") for i in ingress] + external
        return ",".join(str(f) for f in found) or "<pending>"
    return ",".join(external) or _NONE


def _service_row(obj: Obj, now: datetime) -> list[Any]:
    spec = obj.get("spec", {})
    selector = spec.get("selector") or {}
    return [
        _meta(obj)["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or _NONE,
        _external_ip(obj),
        _service_ports(spec),
        _created(obj, now),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or _NONE,
    ]


def _service_account_row(obj: Obj, now: datetime) -> list[Any]:
    return [_meta(obj)["name"], len(obj.get("secrets") or []), _created(obj, now)]


def _created_at_row(obj: Obj, _now: datetime) -> list[Any]:
    return [_meta(obj)["name"], _meta(obj).get("creationTimestamp", "")]


def _binding_row(obj: Obj, now: datetime) -> list[Any]:
    ref = obj.get("roleRef") or {}
    subjects = obj.get("subjects") or []

    def names(kind: str) -> str:
        if kind == "ServiceAccount":
            found = [
                f"{s.get('namespace', '')}/{s.get('name')}"
                for s in subjects
                if s.get("kind") == kind
            ]
        else:
            found = [str(s.get("name")) for s in subjects if s.get("kind") == kind]
        return ", ".join(found)

    return [
        _meta(obj)["name"],
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        _created(obj, now),
        names("User"),
        names("Group"),
        names("ServiceAccount"),
    ]


def _job_row(obj: Obj, now: datetime) -> list[Any]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    completions = spec.get("completions")
    succeeded = int(status.get("succeeded", 0))
    if completions is not None:
        done = f"{succeeded}/{completions}"
    else:
        parallelism = int(spec.get("parallelism", 0))
        done = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    started = parse_time(status.get("startTime"))
    finished = parse_time(status.get("completionTime"))
    duration = (
        "" if started is None else human_duration(((finished or now) - started).total_seconds())
    )
    names, images = _containers({"spec": spec})
    return [_meta(obj)["name"], done, duration, _created(obj, now), names, images, _selector(obj)]


def _cronjob_row(obj: Obj, now: datetime) -> list[Any]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    last = status.get("lastScheduleTime")
    job = spec.get("jobTemplate", {})
    names, images = _containers(job)
    return [
        _meta(obj)["name"],
        spec.get("schedule", ""),
        "True" if spec.get("suspend") else "False",
        len(status.get("active") or []),
        age(last, now) if last else _NONE,
        _created(obj, now),
        names,
        images,
        _selector(job),
    ]


def _network_policy_row(obj: Obj, now: datetime) -> list[Any]:
    selector = _selector({"spec": {"selector": obj.get("spec", {}).get("podSelector")}})
    return [_meta(obj)["name"], selector if selector != _NONE else _NONE, _created(obj, now)]


def _pdb_row(obj: Obj, now: datetime) -> list[Any]:
    spec = obj.get("spec", {})
    return [
        _meta(obj)["name"],
        str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
        str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
        int(obj.get("status", {}).get("disruptionsAllowed", 0)),
        _created(obj, now),
    ]


def _priority_class_row(obj: Obj, now: datetime) -> list[Any]:
    return [
        _meta(obj)["name"],
        int(obj.get("value", 0)),
        bool(obj.get("globalDefault", False)),
        _created(obj, now),
        str(obj.get("preemptionPolicy") or ""),
    ]


def _generic_row(obj: Obj, now: datetime) -> list[Any]:
    return [_meta(obj)["name"], _created(obj, now)]


_S, _I, _B, _D = "string", "integer", "boolean", "date"
_BINDING_COLUMNS: list[Column] = [
    ("Name", _S, 0),
    ("Role", _S, 0),
    ("Age", _S, 0),
    ("Users", _S, 1),
    ("Groups", _S, 1),
    ("ServiceAccounts", _S, 1),
]

PRINTERS: dict[tuple[str, str], tuple[list[Column], Printer]] = {
    PODS.key: (
        [
            ("Name", _S, 0),
            ("Ready", _S, 0),
            ("Status", _S, 0),
            ("Restarts", _S, 0),
            ("Age", _S, 0),
            ("IP", _S, 1),
            ("Node", _S, 1),
            ("Nominated Node", _S, 1),
            ("Readiness Gates", _S, 1),
        ],
        _pod_row,
    ),
    NODES.key: (
        [
            ("Name", _S, 0),
            ("Status", _S, 0),
            ("Roles", _S, 0),
            ("Age", _S, 0),
            ("Version", _S, 0),
            ("Internal-IP", _S, 1),
            ("External-IP", _S, 1),
            ("OS-Image", _S, 1),
            ("Kernel-Version", _S, 1),
            ("Container-Runtime", _S, 1),
        ],
        _node_row,
    ),
    LEASES.key: ([("Name", _S, 0), ("Holder", _S, 0), ("Age", _S, 0)], _lease_row),
    EVENTS.key: (
        [
            ("Last Seen", _S, 0),
            ("Type", _S, 0),
            ("Reason", _S, 0),
            ("Object", _S, 0),
            ("Message", _S, 0),
            ("Subobject", _S, 1),
            ("Source", _S, 1),
            ("First Seen", _S, 1),
            ("Count", _S, 1),
            ("Name", _S, 1),
        ],
        _event_row,
    ),
    STATEFULSETS.key: (
        [
            ("Name", _S, 0),
            ("Ready", _S, 0),
            ("Age", _S, 0),
            ("Containers", _S, 1),
            ("Images", _S, 1),
        ],
        _statefulset_row,
    ),
    DEPLOYMENTS.key: (
        [
            ("Name", _S, 0),
            ("Ready", _S, 0),
            ("Up-to-date", _I, 0),
            ("Available", _I, 0),
            ("Age", _S, 0),
            ("Containers", _S, 1),
            ("Images", _S, 1),
            ("Selector", _S, 1),
        ],
        _deployment_row,
    ),
    REPLICASETS.key: (
        [
            ("Name", _S, 0),
            ("Desired", _I, 0),
            ("Current", _I, 0),
            ("Ready", _I, 0),
            ("Age", _S, 0),
            ("Containers", _S, 1),
            ("Images", _S, 1),
            ("Selector", _S, 1),
        ],
        _replicaset_row,
    ),
    DAEMONSETS.key: (
        [
            ("Name", _S, 0),
            ("Desired", _I, 0),
            ("Current", _I, 0),
            ("Ready", _I, 0),
            ("Up-to-date", _I, 0),
            ("Available", _I, 0),
            ("Node Selector", _S, 0),
            ("Age", _S, 0),
            ("Containers", _S, 1),
            ("Images", _S, 1),
            ("Selector", _S, 1),
        ],
        _daemonset_row,
    ),
    NAMESPACES.key: ([("Name", _S, 0), ("Status", _S, 0), ("Age", _S, 0)], _namespace_row),
    CONFIGMAPS.key: ([("Name", _S, 0), ("Data", _I, 0), ("Age", _S, 0)], _configmap_row),
    PVCS.key: (
        [
            ("Name", _S, 0),
            ("Status", _S, 0),
            ("Volume", _S, 0),
            ("Capacity", _S, 0),
            ("Access Modes", _S, 0),
            ("StorageClass", _S, 0),
            ("Age", _S, 0),
            ("VolumeMode", _S, 1),
        ],
        _pvc_row,
    ),
    PVS.key: (
        [
            ("Name", _S, 0),
            ("Capacity", _S, 0),
            ("Access Modes", _S, 0),
            ("Reclaim Policy", _S, 0),
            ("Status", _S, 0),
            ("Claim", _S, 0),
            ("StorageClass", _S, 0),
            ("Reason", _S, 0),
            ("Age", _S, 0),
            ("VolumeMode", _S, 1),
        ],
        _pv_row,
    ),
    VOLUME_ATTACHMENTS.key: (
        [
            ("Name", _S, 0),
            ("Attacher", _S, 0),
            ("PV", _S, 0),
            ("Node", _S, 0),
            ("Attached", _B, 0),
            ("Age", _S, 0),
        ],
        _volume_attachment_row,
    ),
    SECRETS.key: ([("Name", _S, 0), ("Type", _S, 0), ("Data", _S, 0), ("Age", _S, 0)], _secret_row),
    SERVICES.key: (
        [
            ("Name", _S, 0),
            ("Type", _S, 0),
            ("Cluster-IP", _S, 0),
            ("External-IP", _S, 0),
            ("Port(s)", _S, 0),
            ("Age", _S, 0),
            ("Selector", _S, 1),
        ],
        _service_row,
    ),
    SERVICE_ACCOUNTS.key: (
        [("Name", _S, 0), ("Secrets", _S, 0), ("Age", _S, 0)],
        _service_account_row,
    ),
    ROLES.key: ([("Name", _S, 0), ("Created At", _D, 0)], _created_at_row),
    CLUSTER_ROLES.key: ([("Name", _S, 0), ("Created At", _D, 0)], _created_at_row),
    ROLE_BINDINGS.key: (_BINDING_COLUMNS, _binding_row),
    CLUSTER_ROLE_BINDINGS.key: (_BINDING_COLUMNS, _binding_row),
    JOBS.key: (
        [
            ("Name", _S, 0),
            ("Completions", _S, 0),
            ("Duration", _S, 0),
            ("Age", _S, 0),
            ("Containers", _S, 1),
            ("Images", _S, 1),
            ("Selector", _S, 1),
        ],
        _job_row,
    ),
    CRONJOBS.key: (
        [
            ("Name", _S, 0),
            ("Schedule", _S, 0),
            ("Suspend", _B, 0),
            ("Active", _I, 0),
            ("Last Schedule", _S, 0),
            ("Age", _S, 0),
            ("Containers", _S, 1),
            ("Images", _S, 1),
            ("Selector", _S, 1),
        ],
        _cronjob_row,
    ),
    NETWORK_POLICIES.key: (
        [("Name", _S, 0), ("Pod-Selector", _S, 0), ("Age", _S, 0)],
        _network_policy_row,
    ),
    PDBS.key: (
        [
            ("Name", _S, 0),
            ("Min Available", _S, 0),
            ("Max Unavailable", _S, 0),
            ("Allowed Disruptions", _I, 0),
            ("Age", _S, 0),
        ],
        _pdb_row,
    ),
    PRIORITY_CLASSES.key: (
        [
            ("Name", _S, 0),
            ("Value", _I, 0),
            ("Global-Default", _B, 0),
            ("Age", _S, 0),
            ("PreemptionPolicy", _S, 0),
        ],
        _priority_class_row,
    ),
}

_GENERIC: tuple[list[Column], Printer] = ([("Name", _S, 0), ("Age", _S, 0)], _generic_row)


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": _meta(obj),
    }


def table(
    rt: ResourceType,
    objects: Sequence[Obj],
    now: datetime,
    *,
    resource_version: str = "",
    include_object: str = "Metadata",
    with_columns: bool = True,
) -> Obj:
    columns, printer = PRINTERS.get(rt.key, _GENERIC)
    definitions = [
        {
            "name": name,
            "type": type_,
            "format": "name" if name == "Name" else "",
            "description": "",
            "priority": priority,
        }
        for name, type_, priority in columns
    ]
    rows = []
    for obj in objects:
        # includeObject=None leaves the row's RawExtension empty, which a real server writes as
        # "object": null.
        rows.append({"cells": printer(obj, now), "object": _row_object(obj, include_object)})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions if with_columns else [],
        "rows": rows,
    }
