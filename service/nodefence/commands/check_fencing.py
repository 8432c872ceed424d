"""``nodefence check-fencing``: the command around ``fencing.check``, which reads every inventory
node's power state; here the settings, the policy and the inventory are loaded, the cluster's
nodes listed when it can be reached, and the answer printed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from nodefence.fencing.binding import NodeIdentity
from nodefence.fencing.check import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_SECONDS,
    FencingCheck,
    as_text,
    check_fencing,
)


async def cluster_nodes(
    seconds: float,
) -> tuple[dict[str, dict[str, str]] | None, list[NodeIdentity], str]:
    """The cluster's nodes and their labels and identities, or ``None`` and why (no KUBECONFIG,
    unreachable)."""
    from nodefence.kube.client import Deadline, KubeClient, KubeError, load_api_client
    from nodefence.kube.convert import node_facts

    try:
        api = await load_api_client()
    except Exception as exc:
        # A kubeconfig error is one line naming the file; anything else by its type alone.
        from nodefence.errors import ConfigError

        why = str(exc) if isinstance(exc, ConfigError) else type(exc).__name__
        return None, [], f"no cluster access (kubeconfig or in-cluster): {why}"
    kube = KubeClient(api)
    try:
        items = await kube.list_nodes(Deadline(seconds))
    except (KubeError, OSError, TimeoutError) as exc:
        return None, [], f"cannot list the cluster's nodes: {exc}"
    finally:
        await kube.close()
    nodes: dict[str, dict[str, str]] = {}
    identities: list[NodeIdentity] = []
    for item in items:
        meta = item.get("metadata") or {}
        nodes[str(meta.get("name", ""))] = {
            str(k): str(v) for k, v in (meta.get("labels") or {}).items()
        }
        facts = node_facts(item)
        identities.append(NodeIdentity(facts.name, facts.system_uuid, facts.provider_id))
    return nodes, identities, ""


def main(
    nodes: Sequence[str],
    output: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> int:
    """The ``check-fencing`` command: 0 only if every node answered (and, with the cluster,
    every node a powering rule matches is in the inventory with the rule's driver)."""
    import json
    import sys

    from nodefence.errors import ConfigError
    from nodefence.observability.logging import configure_logging
    from nodefence.policy import PolicyError
    from nodefence.runtime import bmc_inventory, effective_policy
    from nodefence.settings import load_settings

    try:
        settings = load_settings(auth_disabled=True, log_level="warning")
        configure_logging(settings.log_format, settings.log_level, stream=sys.stderr)
        policy = effective_policy(settings)
        inventory = bmc_inventory(settings)
    except (ConfigError, PolicyError) as exc:
        print(f"nodefence: {exc}", file=sys.stderr)
        return 2
    if inventory is None and not nodes:
        print(
            "nodefence: no BMC inventory is configured (NODEFENCE_BMC_INVENTORY)", file=sys.stderr
        )
        return 2

    async def run() -> FencingCheck:
        started = time.monotonic()
        cluster, identities, note = await cluster_nodes(settings.request_deadline_seconds)
        result = await check_fencing(
            policy,
            inventory,
            nodes,
            cluster,
            cluster_note=note,
            identities=identities,
            timeout=timeout,
            concurrency=concurrency,
        )
        result.seconds = round(time.monotonic() - started, 3)
        return result

    result = asyncio.run(run())
    print(json.dumps(result.as_dict(), indent=2) if output == "json" else as_text(result))
    return 0 if result.ok else 1
