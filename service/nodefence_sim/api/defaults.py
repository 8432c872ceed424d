"""The defaulting a real API server applies on create (``SetDefaults_*`` of core/v1, apps/v1,
batch/v1, policy/v1), for the kinds served.

Typed clients and kubectl read these fields back: ``kubectl rollout status sts`` refuses a
StatefulSet without ``updateStrategy``, a Service without a ``clusterIP`` prints nothing
useful, and an object that looks different from the cluster's is a fixture that lies.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
from collections.abc import Iterable
from typing import Any

from nodefence_sim.resources import (
    CRONJOBS,
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    PDBS,
    PODS,
    PRIORITY_CLASSES,
    REPLICASETS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    ResourceType,
)
from nodefence_sim.store import Obj

SERVICE_CIDR = ipaddress.IPv4Network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)
_APPS = frozenset({STATEFULSETS.key, DEPLOYMENTS.key, REPLICASETS.key, DAEMONSETS.key})
_WITH_SPEC = _APPS | {PODS.key, JOBS.key, CRONJOBS.key, SERVICES.key}


def _pull_policy(image: str) -> str:
    """``Always`` for ``:latest`` or no tag (a digest pins the image), else ``IfNotPresent``."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _container(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if isinstance(container.get("image"), str):
        container.setdefault("imagePullPolicy", _pull_policy(container["image"]))
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def pod_spec(spec: dict[str, Any], restart_policy: str = "Always") -> None:
    """``SetDefaults_PodSpec`` and its containers'."""
    spec.setdefault("restartPolicy", restart_policy)
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _container(container)


def _template(spec: dict[str, Any], restart_policy: str = "Always") -> None:
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        pod_spec(template.setdefault("spec", {}), restart_policy)


def _apps(rt: ResourceType, spec: dict[str, Any]) -> None:
    if rt.key != DAEMONSETS.key:
        spec.setdefault("replicas", 1)
    if rt.key != REPLICASETS.key:
        spec.setdefault("revisionHistoryLimit", 10)
    if rt.key == DEPLOYMENTS.key:
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("progressDeadlineSeconds", 600)
    elif rt.key == STATEFULSETS.key:
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    elif rt.key == DAEMONSETS.key:
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", 1)
            rolling.setdefault("maxSurge", 0)
    _template(spec)


def _job(spec: dict[str, Any], uid: str, name: str) -> None:
    """``SetDefaults_Job`` plus the selector and labels the Job registry generates."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if uid and not spec.get("manualSelector"):
        generated = {"controller-uid": uid}
        spec["selector"] = {"matchLabels": dict(generated)}
        template = spec.setdefault("template", {})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.update({**generated, "job-name": name})
    _template(spec, restart_policy="Never")


def secret_data(obj: Obj) -> None:
    """``stringData`` is write-only: merged into ``data``, base64-encoded, on every write."""
    strings = obj.pop("stringData", None)
    if isinstance(strings, dict):
        data = obj.setdefault("data", {})
        for key, value in strings.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def _service(spec: dict[str, Any], used_ips: set[str], used_ports: set[int]) -> Obj:
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    external = spec["type"] in ("NodePort", "LoadBalancer")
    for port in spec.get("ports") or []:
        if not isinstance(port, dict):
            continue
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
        if external and not port.get("nodePort"):
            port["nodePort"] = next(p for p in NODE_PORTS if p not in used_ports)
            used_ports.add(port["nodePort"])
    if spec["type"] != "ExternalName":
        if not spec.get("clusterIP"):
            hosts = SERVICE_CIDR.hosts()
            next(hosts)  # 10.96.0.1 is the kubernetes Service's
            spec["clusterIP"] = next(str(ip) for ip in hosts if str(ip) not in used_ips)
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        if spec["clusterIP"] != "None" or spec.get("selector"):
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if external:
        spec.setdefault("externalTrafficPolicy", "Cluster")
    return {"loadBalancer": {}}


def defaults_on_create(rt: ResourceType, obj: Obj, existing: Iterable[Obj]) -> None:
    """Default ``obj`` (a new object of type ``rt``) in place; ``existing`` are the stored
    objects of that type (for what a Service allocates). Pods' own defaults come first."""
    # Only kinds with a spec get one (a ConfigMap or a Role stored with "spec": {} would not
    # round-trip through a typed client as the real server's objects do).
    spec = obj.setdefault("spec", {}) if rt.key in _WITH_SPEC else {}
    if not isinstance(spec, dict):
        return
    if rt.key == PODS.key:
        pod_spec(spec)
    elif rt.key in _APPS:
        _apps(rt, spec)
    elif rt.key == JOBS.key:
        meta = obj.get("metadata") or {}
        _job(spec, str(meta.get("uid") or ""), str(meta.get("name") or ""))
        obj["status"] = {}
    elif rt.key == CRONJOBS.key:
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
        job_spec = spec.setdefault("jobTemplate", {}).setdefault("spec", {})
        job_spec.setdefault("template", {}).setdefault("metadata", {})
        _template(job_spec, restart_policy="Never")
        obj["status"] = {}
    elif rt.key == SECRETS.key:
        obj.setdefault("type", "Opaque")
        secret_data(obj)
    elif rt.key == SERVICES.key:
        stored = list(existing)
        ips = {str(o.get("spec", {}).get("clusterIP")) for o in stored}
        ports = {
            int(p["nodePort"])
            for o in stored
            for p in o.get("spec", {}).get("ports") or []
            if isinstance(p, dict) and p.get("nodePort")
        }
        obj["status"] = _service(spec, ips, ports)
    elif rt.key == PDBS.key:
        obj["status"] = {
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
        }
    elif rt.key == PRIORITY_CLASSES.key:
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def service_update(old: Obj, new: Obj) -> None:
    """A Service PUT without the allocated IPs and node ports keeps them, as the registry
    does (so a client-side ``apply`` of a manifest does not try to release them)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec")
    if not isinstance(new_spec, dict):
        return
    for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        if key in old_spec and key not in new_spec:
            new_spec[key] = copy.deepcopy(old_spec[key])
    allocated = {
        (p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
        for p in old_spec.get("ports") or []
        if isinstance(p, dict)
    }
    for port in new_spec.get("ports") or []:
        if isinstance(port, dict) and not port.get("nodePort"):
            node_port = allocated.get((port.get("port"), port.get("protocol", "TCP")))
            if node_port:
                port["nodePort"] = node_port


def workload_defaults(rt: ResourceType, obj: Obj) -> Obj:
    """A workload that a scenario stores directly, defaulted (a copy) as if it had been created
    through the API: ``kubectl rollout status`` reads its update strategy."""
    if rt.key not in _APPS:
        return obj
    defaulted = copy.deepcopy(obj)
    defaults_on_create(rt, defaulted, ())
    return defaulted
