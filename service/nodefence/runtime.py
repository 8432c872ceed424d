"""Assembling a pipeline from settings: the one place that knows how the parts fit."""

from __future__ import annotations

from nodefence.kube.client import KubeClient, load_api_client
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


async def build_pipeline(
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    policy: Policy | None = None,
    kubeconfig: str | None = None,
) -> Pipeline:
    metrics = metrics or Metrics()
    api = await load_api_client(kubeconfig)
    kube = KubeClient(api, on_request=metrics.kube_api_request)
    options = PipelineOptions(
        namespace=settings.namespace,
        identity=settings.identity,
        deadline_seconds=settings.request_deadline_seconds,
    )
    return Pipeline(kube, policy or effective_policy(settings), metrics, options)
