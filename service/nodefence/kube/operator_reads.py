"""The reads only an operator's command makes, with the operator's own credentials: where
nodefence is installed, and who the credentials belong to.

They are kept out of ``KubeClient``, whose methods are exactly what the receiver's
ServiceAccount is granted (``deploy/base/rbac.yaml``; a test holds the two equal): the
receiver never lists Deployments or asks who it is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from nodefence.kube.client import Deadline, Json, KubeClient, KubeError, Query


@dataclass(frozen=True)
class Workload:
    """A kind that runs nodefence and where its objects are listed. ``served_by``: the group
    version and resource a kind that only some clusters have (a CRD's) is served as; it is
    listed only where discovery says the API server serves it, since elsewhere its path is not
    an API at all."""

    kind: str
    path: str
    served_by: tuple[str, str] | None = None


WORKLOADS = (
    Workload("Deployment", "/apis/apps/v1/namespaces/{namespace}/deployments"),
    Workload(
        "Knative Service",
        "/apis/serving.knative.dev/v1/namespaces/{namespace}/services",
        ("serving.knative.dev/v1", "services"),
    ),
)
# The labels nodefence's manifests carry (Kustomize: part-of; the Helm chart: name).
SELECTORS = ("app.kubernetes.io/part-of=nodefence", "app.kubernetes.io/name=nodefence")


class OperatorReads(KubeClient):
    async def serves(self, group_version: str, resource: str, deadline: Deadline) -> bool:
        """Whether the API server serves ``resource`` in ``group_version`` (``apps/v1``), as
        its discovery document for that group version lists it; 404: the group is not
        installed here."""
        path = f"/apis/{group_version}"
        try:
            body = await self._call("get", lambda: self._send("GET", path), deadline)
        except KubeError as exc:
            if exc.status in (403, 404):
                return False
            raise
        return any(r.get("name") == resource for r in body.get("resources") or [])

    async def workloads(self, namespace: str, deadline: Deadline) -> list[tuple[str, Json]]:
        """Each object of a ``WORKLOADS`` kind in ``namespace`` carrying one of nodefence's
        labels, with its kind; a kind the API server does not serve is not asked for."""
        found: list[tuple[str, Json]] = []
        for workload in WORKLOADS:
            if workload.served_by is not None and not await self.serves(
                *workload.served_by, deadline
            ):
                continue
            listed = await self.labelled(workload.path, namespace, deadline)
            found += [(workload.kind, item) for item in listed]
        return found

    async def labelled(self, path: str, namespace: str, deadline: Deadline) -> list[Json]:
        """The objects at ``path`` in ``namespace`` carrying one of nodefence's labels; none
        where the kind does not exist here (404: a CRD removed since discovery) or the
        credentials may not list it (403)."""
        found: dict[str, Json] = {}
        for selector in SELECTORS:
            query: Query = [("labelSelector", selector), ("limit", 50)]
            send = functools.partial(self._send, "GET", path, query=query, namespace=namespace)
            try:
                body = await self._call("list", send, deadline)
            except KubeError as exc:
                if exc.status in (403, 404):
                    return list(found.values())
                raise
            for item in body.get("items") or []:
                found[str((item.get("metadata") or {}).get("name", ""))] = item
        return list(found.values())

    async def who_am_i(self, deadline: Deadline) -> str | None:
        """The authenticated user the API server sees (a SelfSubjectReview, GA in Kubernetes
        1.28); None where the server does not offer it."""
        body: Json = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
        try:
            reply = await self._call(
                "create", lambda: self._send("POST", path, body=body), deadline
            )
        except KubeError as exc:
            if exc.status in (403, 404, 405):
                return None
            raise
        user = ((reply.get("status") or {}).get("userInfo") or {}).get("username")
        return str(user) if user else None
