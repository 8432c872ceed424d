"""The kinds added for everyday kubectl and the project's manifests, with the defaulting and
registry behaviour of the real server: Secrets' stringData, Services' allocated IPs and node
ports, Jobs' generated selectors, apps/v1 and container defaults, discovery."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import pytest

from nodefence_sim.testing import SimulatorHandle


async def _call(
    handle: SimulatorHandle,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, handle.url + path, json=body, headers={"Content-Type": content_type}
        ) as response,
    ):
        return response.status, await response.json()


NS = "/api/v1/namespaces/default"


async def test_secret_string_data_is_encoded_into_data(sim_api: SimulatorHandle) -> None:
    status, secret = await _call(
        sim_api,
        "POST",
        f"{NS}/secrets",
        {"metadata": {"name": "token"}, "stringData": {"token": "s3cret"}},
    )
    assert status == 201
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["token"]) == b"s3cret"
    assert "stringData" not in secret
    status, patched = await _call(
        sim_api,
        "PATCH",
        f"{NS}/secrets/token",
        {"stringData": {"extra": "x"}},
        "application/merge-patch+json",
    )
    assert status == 200
    assert set(patched["data"]) == {"token", "extra"}


async def test_services_get_distinct_ips_and_keep_them(sim_api: SimulatorHandle) -> None:
    spec = {"selector": {"app": "web"}, "ports": [{"port": 80}]}
    _, first = await _call(
        sim_api, "POST", f"{NS}/services", {"metadata": {"name": "a"}, "spec": spec}
    )
    _, second = await _call(
        sim_api,
        "POST",
        f"{NS}/services",
        {"metadata": {"name": "b"}, "spec": {**spec, "type": "NodePort"}},
    )
    assert first["spec"]["clusterIP"] != second["spec"]["clusterIP"]
    assert first["spec"]["clusterIPs"] == [first["spec"]["clusterIP"]]
    assert first["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    assert (first["spec"]["type"], first["spec"]["sessionAffinity"]) == ("ClusterIP", "None")
    assert 30000 <= second["spec"]["ports"][0]["nodePort"] <= 32767
    replaced = {"metadata": {"name": "b"}, "spec": {**spec, "type": "NodePort"}}
    status, updated = await _call(sim_api, "PUT", f"{NS}/services/b", replaced)
    assert status == 200
    assert updated["spec"]["clusterIP"] == second["spec"]["clusterIP"]
    assert updated["spec"]["ports"][0]["nodePort"] == second["spec"]["ports"][0]["nodePort"]


async def test_job_gets_its_generated_selector_and_defaults(sim_api: SimulatorHandle) -> None:
    template = {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
    status, job = await _call(
        sim_api,
        "POST",
        "/apis/batch/v1/namespaces/default/jobs",
        {"metadata": {"name": "once"}, "spec": {"template": template}},
    )
    assert status == 201
    uid = job["metadata"]["uid"]
    spec = job["spec"]
    assert spec["selector"] == {"matchLabels": {"controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {"controller-uid": uid, "job-name": "once"}
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert (spec["completionMode"], spec["suspend"]) == ("NonIndexed", False)
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    container = spec["template"]["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["terminationMessagePath"] == "/dev/termination-log"


@pytest.mark.parametrize(
    ("plural", "expected"),
    [
        (
            "deployments",
            {
                "replicas": 1,
                "revisionHistoryLimit": 10,
                "progressDeadlineSeconds": 600,
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
                },
            },
        ),
        (
            "statefulsets",
            {
                "replicas": 1,
                "revisionHistoryLimit": 10,
                "podManagementPolicy": "OrderedReady",
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            },
        ),
    ],
)
async def test_apps_defaults(
    sim_api: SimulatorHandle, plural: str, expected: dict[str, Any]
) -> None:
    body = {
        "metadata": {"name": "app"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }
    status, created = await _call(
        sim_api, "POST", f"/apis/apps/v1/namespaces/default/{plural}", body
    )
    assert status == 201
    assert {k: created["spec"][k] for k in expected} == expected
    pod_spec = created["spec"]["template"]["spec"]
    assert (pod_spec["restartPolicy"], pod_spec["dnsPolicy"]) == ("Always", "ClusterFirst")
    assert pod_spec["containers"][0]["imagePullPolicy"] == "Always"


async def test_discovery_serves_the_new_groups(sim_api: SimulatorHandle) -> None:
    _, groups = await _call(sim_api, "GET", "/apis")
    names = {g["name"] for g in groups["groups"]}
    assert {"rbac.authorization.k8s.io", "batch", "networking.k8s.io", "policy"} <= names
    _, core = await _call(sim_api, "GET", "/api/v1")
    served = {r["name"] for r in core["resources"]}
    assert {"secrets", "services", "serviceaccounts"} <= served
