"""What ``check-config`` checks beyond the files: that the cluster and Alertmanager it is
configured for answer, and that nodefence's namespace can be read with the credentials in use.

A check that exits 0 while the API server is unreachable tells an operator the opposite of the
truth, so anything that does not answer makes ``check-config`` fail, and so does having no API to
reach at all (no ``KUBECONFIG``, not in a cluster): nodefence cannot work without one. Checking
the files alone (as CI does, or before a first deploy) is asked for with ``--offline``, and the
report and a line on stderr say that nothing was reached.
"""

from __future__ import annotations

import os
from typing import Any

from nodefence.alertmanager.client import (
    AlertmanagerUnavailableError,
    active_alerts,
    cluster_label_values,
)
from nodefence.engine import record as fence_record
from nodefence.errors import ClusterUnavailableError, ConfigError
from nodefence.fencing.inventory import Inventory
from nodefence.kube.client import Deadline, KubeClient, KubeError, load_api_client
from nodefence.kube.facts import CONTROL_CONFIGMAP
from nodefence.policy import Policy
from nodefence.settings import Settings

CONNECT_SECONDS = 5.0
IN_CLUSTER = "KUBERNETES_SERVICE_HOST"
NO_CLUSTER = "no KUBECONFIG, no ~/.kube/config, and not running in a cluster"
OFFLINE: dict[str, Any] = {
    "checked": False,
    "why": "--offline: only the files (settings, policy, BMC inventory) were checked; the "
    "Kubernetes API and Alertmanager were not reached",
}


def cluster_configured() -> bool:
    """A kubeconfig to read (as kubectl finds one), or a pod's service account."""
    from nodefence.kube.access import locate

    try:
        source = locate()
    except ConfigError:
        # Named but unusable: the loader says what is wrong with it.
        return True
    return not source.in_cluster or bool(os.environ.get(IN_CLUSTER))


async def _kubernetes(
    settings: Settings, problems: list[str], inventory: Inventory | None
) -> dict[str, Any]:
    from kubernetes_asyncio.config import ConfigException

    if not cluster_configured():
        problems.append(
            f"cannot reach the Kubernetes API: {NO_CLUSTER} (set KUBECONFIG, or pass --offline "
            "to check the files only)"
        )
        return {"checked": False, "reachable": False, "why": NO_CLUSTER}
    try:
        api = await load_api_client()
    except (ConfigException, ConfigError, OSError) as exc:
        problems.append(f"no usable cluster configuration: {exc}")
        return {"checked": True, "reachable": False, "error": str(exc)}
    kube = KubeClient(api)
    server = str(api.configuration.host)
    deadline = Deadline(min(CONNECT_SECONDS, settings.request_deadline_seconds))
    try:
        info = await kube.version(deadline)
        report: dict[str, Any] = {
            "checked": True,
            "reachable": True,
            "server": server,
            "version": info.get("gitVersion"),
        }
        reads: dict[str, str] = {}
        for name in (fence_record.CONFIGMAP, CONTROL_CONFIGMAP):
            try:
                await kube.get_configmap(settings.namespace, name, deadline)
                reads[name] = "readable"
            except KubeError as exc:
                if exc.status != 404:
                    raise
                reads[name] = "absent (not written yet)"
        report["namespace"] = {settings.namespace: reads}
        if inventory is not None and any(entry.identity for entry in inventory.nodes.values()):
            report["stated_identities"] = await _stated_identities(kube, inventory, deadline)
            problems += report["stated_identities"]["problems"]
        return report
    except ClusterUnavailableError as exc:
        problems.append(f"cannot reach the Kubernetes API at {server}: {exc}")
        return {"checked": True, "reachable": False, "server": server, "error": str(exc)}
    except KubeError as exc:
        problems.append(
            f"the Kubernetes API at {server} refused a read in namespace {settings.namespace}: "
            f"{exc}"
        )
        return {"checked": True, "reachable": True, "server": server, "error": str(exc)}
    finally:
        await kube.close()


async def _stated_identities(
    kube: KubeClient, inventory: Inventory, deadline: Deadline
) -> dict[str, Any]:
    """The inventory's stated identities held against the systemUUID each Node reports (S10):
    one that contradicts its Node is a configuration error now, not a refused fence later."""
    from nodefence.fencing.binding import NodeIdentity, stated_identity_problems
    from nodefence.kube.convert import node_facts

    nodes = [node_facts(item) for item in await kube.list_nodes(deadline)]
    identities = [NodeIdentity(n.name, n.system_uuid, n.provider_id) for n in nodes]
    checked = sorted(n.name for n in nodes if n.name in inventory.nodes)
    return {"checked": checked, "problems": stated_identity_problems(inventory, identities)}


async def _alertmanager(settings: Settings, policy: Policy, problems: list[str]) -> dict[str, Any]:
    config = settings.alertmanager
    if config is None:
        return {"checked": False, "why": "NODEFENCE_ALERTMANAGER_URL is unset"}
    try:
        firing = await active_alerts(config, policy.alerts.names, policy.alerts.node_labels)
        clusters = await cluster_label_values(config, policy.alerts.names)
    except AlertmanagerUnavailableError as exc:
        problems.append(str(exc))
        return {"checked": True, "reachable": False, "error": str(exc)}
    report: dict[str, Any] = {
        "checked": True,
        "reachable": True,
        "node_alerts_firing": len(firing),
        "warnings": [],
    }
    varying = {name: values for name, values in clusters.items() if len(values) > 1}
    if varying and not config.matchers:
        shown = "; ".join(f"{name}: {', '.join(values)}" for name, values in varying.items())
        report["warnings"].append(
            f"the node alerts Alertmanager holds come from several clusters ({shown}) and "
            "NODEFENCE_ALERTMANAGER_MATCHERS is unset: another cluster's alert or silence "
            'would count as this cluster\'s (set it, e.g. cluster="<this cluster>")'
        )
    return report


async def reachability(
    settings: Settings, policy: Policy, inventory: Inventory | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The report's ``reachability`` section and the problems that make check-config fail."""
    problems: list[str] = []
    report = {
        "kubernetes": await _kubernetes(settings, problems, inventory),
        "alertmanager": await _alertmanager(settings, policy, problems),
    }
    return report, problems
