"""Whether nodefence is installed in the namespace an operator's command names.

``pause`` written to a namespace nodefence does not run in pauses nothing, and ``status`` read
from one reports "not paused, nothing fenced" about a cluster it knows nothing of: both would
tell the operator the opposite of the truth. So the commands that read or write nodefence's
state first look for nodefence there (its fence record, its Deployment or Knative Service, its
policy ConfigMap) and refuse, naming the namespace and how to choose another, where there is
none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodefence.commands.failures import CommandRefusedError
from nodefence.engine import record as fence_record
from nodefence.kube.client import Deadline, KubeClient, KubeError
from nodefence.kube.operator_reads import SELECTORS, OperatorReads

CONFIGMAPS = "/api/v1/namespaces/{namespace}/configmaps"


@dataclass(frozen=True)
class Install:
    namespace: str
    # What shows nodefence there, in words ("Deployment nodefence", ...); empty: nothing.
    found: tuple[str, ...]


async def find(kube: KubeClient, namespace: str, deadline: Deadline) -> Install:
    found: list[str] = []
    try:
        await kube.get_configmap(namespace, fence_record.CONFIGMAP, deadline)
        found.append(f"fence record ConfigMap {fence_record.CONFIGMAP}")
    except KubeError as exc:
        if exc.status != 404:
            raise
    reads = OperatorReads(kube.api)
    found += [f"{kind} {_name(o)}" for kind, o in await reads.workloads(namespace, deadline)]
    found += [
        f"ConfigMap {_name(o)}"
        for o in await reads.labelled(CONFIGMAPS, namespace, deadline)
        if _name(o).startswith("nodefence-policy")
    ]
    return Install(namespace, tuple(found))


def _name(obj: dict[str, object]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, dict) else ""


async def require(kube: KubeClient, namespace: str, deadline: Deadline) -> Install:
    """The install in ``namespace``, or a refusal saying where to look instead."""
    install = await find(kube, namespace, deadline)
    if not install.found:
        raise CommandRefusedError(
            f"nodefence is not installed in namespace {namespace}: no fence record (ConfigMap "
            f"{fence_record.CONFIGMAP}), no Deployment or Knative Service labelled "
            f"{' or '.join(SELECTORS)}, and no nodefence-policy ConfigMap there; name the "
            "namespace nodefence runs in with -n NAMESPACE (or NODEFENCE_NAMESPACE)"
        )
    return install
