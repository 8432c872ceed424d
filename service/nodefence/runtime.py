"""Assembling a pipeline from settings: the one place that knows how the parts fit."""

from __future__ import annotations

from nodefence.errors import ConfigError
from nodefence.fencing.inventory import Inventory, InventoryError, load_inventory
from nodefence.kube.client import KubeClient, load_api_client
from nodefence.kube.ratelimit import build_limiter
from nodefence.observability.metrics import Metrics
from nodefence.pipeline import Pipeline, PipelineOptions
from nodefence.policy import Policy, load_policy
from nodefence.settings import Settings


def effective_policy(settings: Settings) -> Policy:
    """The policy file, with the process-level dry-run switch able only to add caution."""
    policy = load_policy(settings.policy_file)
    if settings.dry_run and not policy.dry_run:
        policy = policy.model_copy(update={"dry_run": True})
    return policy


def bmc_inventory(settings: Settings) -> Inventory | None:
    """The BMC inventory, validated at start: a broken one is a configuration error, not a
    surprise at 3 a.m. when the first power-off is due."""
    if settings.bmc_inventory is None:
        return None
    try:
        return load_inventory(settings.bmc_inventory)
    except InventoryError as exc:
        raise ConfigError(str(exc)) from None


async def build_pipeline(
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    policy: Policy | None = None,
    kubeconfig: str | None = None,
) -> Pipeline:
    metrics = metrics or Metrics()
    api = await load_api_client(kubeconfig)
    limiter = build_limiter(
        settings.api_qps, settings.api_burst, settings.api_fence_qps, settings.api_fence_burst
    )
    kube = KubeClient(api, on_request=metrics.kube_api_request, limiter=limiter)
    options = PipelineOptions(
        namespace=settings.namespace,
        identity=settings.identity,
        deadline_seconds=settings.request_deadline_seconds,
    )
    return Pipeline(
        kube,
        policy or effective_policy(settings),
        metrics,
        options,
        inventory=bmc_inventory(settings),
        alertmanager=settings.alertmanager,
    )
