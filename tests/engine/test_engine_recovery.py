"""Each incident's recovery time (``engine.recovery``): what the fence remembers, and when the
reconcile pass counts the incident, on the API server's clock only."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

from engine_factories import (
    LOCAL_CLOCK,
    NODE,
    NOW,
    ago,
    entry,
    event,
    facts,
    fenced_node,
    lease,
    node,
    policy,
)

from nodefence.engine import record as fence_record
from nodefence.engine import recovery
from nodefence.engine.caps import stored_size
from nodefence.engine.decide import decide
from nodefence.engine.held_pods import (
    DEPLOYMENT,
    MAX_HELD_BYTES,
    MAX_HELD_PODS,
    STATEFULSET,
    HeldPod,
    HeldPods,
    bounded,
    held_json,
    parse_held,
)
from nodefence.engine.model import (
    ClaimAction,
    Facts,
    PodFacts,
    RecordRecoveryAction,
    Verdict,
)
from nodefence.engine.record import FenceEntry, Phase

SILENT = ago(120)


def sts_pod(
    ordinal: int,
    *,
    node_name: str = NODE,
    owner: str = "db",
    namespace: str = "apps",
    created: datetime | None = None,
    changed: datetime | None = None,
    phase: str = "Running",
    terminating: bool = False,
) -> PodFacts:
    return PodFacts(
        namespace=namespace,
        name=f"{owner}-{ordinal}",
        uid=f"uid-{owner}-{ordinal}-{node_name}",
        node_name=node_name,
        deletion_timestamp=ago(600) if terminating else None,
        owner_kind="StatefulSet",
        owner_name=owner,
        phase=phase,
        created=created,
        changed=changed,
    )


def deploy_pod(
    suffix: str,
    *,
    node_name: str = NODE,
    deployment: str = "web",
    template_hash: str = "5d8f7c",
    namespace: str = "apps",
    created: datetime | None = None,
    changed: datetime | None = None,
    phase: str = "Running",
) -> PodFacts:
    return PodFacts(
        namespace=namespace,
        name=f"{deployment}-{template_hash}-{suffix}",
        uid=f"uid-{deployment}-{suffix}",
        node_name=node_name,
        owner_kind="ReplicaSet",
        owner_name=f"{deployment}-{template_hash}",
        phase=phase,
        created=created,
        changed=changed,
        template_hash=template_hash,
    )


def incident(*pods: HeldPod, silent: datetime | None = SILENT) -> FenceEntry:
    """A fenced node's entry, fenced 60 s after it went silent, remembering ``pods``."""
    return dataclasses.replace(
        entry(claimed=70),
        fenced_at=ago(60),
        proof="redfish https://bmc/redfish/v1/Systems/1 reports the machine is Off",
        power_off_sent_at=ago(65),
        silent_since=silent,
        held=HeldPods(tuple(pods)),
    )


def measuring(held: FenceEntry, elsewhere: tuple[PodFacts, ...] | None, **kw: object) -> Facts:
    return dataclasses.replace(facts(fenced_node(), held=held, **kw), elsewhere=elsewhere)  # type: ignore[arg-type]


DB0 = HeldPod("apps", STATEFULSET, "db", 0)
BMC = {"fencing": {"driver": "redfish", "action": "off"}}
WEB = HeldPod("apps", DEPLOYMENT, "web")


# ------------------------------------------------------------------ what a fence remembers


def test_the_claim_remembers_the_lease_s_stamped_renewal_and_the_pods_that_come_back() -> None:
    pods = (
        sts_pod(0),
        sts_pod(2, terminating=True),
        deploy_pod("a"),
        deploy_pod("b"),
        # Not brought back elsewhere by anyone, or not this node's: not remembered.
        dataclasses.replace(sts_pod(1), owner_kind="DaemonSet", owner_name="agent"),
        PodFacts("apps", "job-x", "uid-j", NODE, owner_kind="Job", owner_name="job"),
        deploy_pod("c", template_hash=""),
        sts_pod(5, phase="Succeeded"),
        sts_pod(3, node_name="worker-2"),
    )
    decided = decide(event(), facts(node(), lease_age=900, pods=pods), policy(), NOW)

    assert decided.verdict is Verdict.FENCE
    claim = next(a for a in decided.actions if isinstance(a, ClaimAction))
    # The Lease's renewal as the API server stamped it, not the kubelet's renewTime.
    assert claim.entry.silent_since == ago(900)
    assert sorted(claim.entry.held.pods) == sorted(
        (DB0, HeldPod("apps", STATEFULSET, "db", 2), WEB, WEB)
    )
    assert fence_record.entry_json(claim.entry)["held"] == {
        "statefulSets": {"apps": {"db": [0, 2]}},
        "deployments": {"apps": {"web": 2}},
    }


def test_a_kubelet_clock_behind_does_not_move_the_remembered_sign_of_life() -> None:
    skewed = facts(node(), lease_=lease(900, kubelet_behind=3600), pods=(sts_pod(0),))
    claim = next(
        a for a in decide(event(), skewed, policy(), NOW).actions if isinstance(a, ClaimAction)
    )
    assert claim.entry.silent_since == ago(900)


def test_a_statefulset_pod_is_one_only_if_named_by_its_owner_and_an_ordinal() -> None:
    odd = (
        dataclasses.replace(sts_pod(0), name="db-x"),
        dataclasses.replace(sts_pod(0), name="db-01"),
        dataclasses.replace(sts_pod(0), name="other-0"),
    )
    assert recovery.held_pods(NODE, odd).count == 0


def test_what_is_remembered_is_bounded_in_pods_and_bytes_and_counts_the_rest() -> None:
    many = [HeldPod("apps", STATEFULSET, "db", i) for i in range(MAX_HELD_PODS + 10)]
    held = bounded(many)
    assert held.count == MAX_HELD_PODS
    assert held.left_out == 10

    hostile = [HeldPod("n" * 63, STATEFULSET, f"{i}" + "o" * 250, 0) for i in range(20)]
    held = bounded(hostile)
    assert 0 < held.count < 20
    assert held.count + held.left_out == 20
    assert stored_size(json.dumps(held_json(held), sort_keys=True)) <= MAX_HELD_BYTES


def test_held_pods_survive_the_record_and_a_hostile_value_reads_as_none() -> None:
    held = incident(DB0, WEB, WEB)
    data = fence_record.encode(fence_record.with_entry(fence_record.FenceRecord(), held))
    again = fence_record.decode(data, "1").entry(NODE)
    assert again == held
    assert parse_held({"statefulSets": "x", "deployments": {"a": {"b": True}}}) == HeldPods()
    # An edited record cannot make nodefence wait for more than the bound.
    assert parse_held({"deployments": {"a": {"b": 10**9}}}).count == MAX_HELD_PODS


# ------------------------------------------------------------------ when it is measured


def test_statefulset_pods_running_elsewhere_and_steady_are_measured_on_server_stamps() -> None:
    held = incident(DB0)
    replacement = sts_pod(0, node_name="worker-2", created=ago(50), changed=ago(40))
    decided = recovery.decide(measuring(held, (replacement,)), policy(rule=BMC), NOW, NODE)

    (action,) = decided.actions
    assert isinstance(action, RecordRecoveryAction)
    assert action.recovered_at == ago(40)
    # From the Lease's stamped renewal (120 s ago) to the pod's last change (40 s ago).
    assert action.seconds == 80.0
    assert action.words.startswith(
        "StatefulSet pods running elsewhere 80 s after the node went silent; fenced at 60 s "
        "on BMC proof"
    )
    assert decided.reasons[0].passed


def test_a_replacement_not_yet_steady_for_the_steady_time_is_not_counted() -> None:
    held = incident(DB0)
    fresh = sts_pod(
        0,
        node_name="worker-2",
        created=ago(50),
        changed=ago(recovery.STEADY_SECONDS - 1),
    )
    decided = recovery.decide(measuring(held, (fresh,)), policy(), NOW, NODE)
    assert decided.actions == ()
    assert "counted once it has stayed so" in decided.reasons[0].message
    assert all(r.passed for r in decided.reasons)


def test_no_replacement_yet_or_one_that_is_not_one_is_not_counted() -> None:
    held = incident(DB0)
    not_yet = (
        # The old pod, still on the fenced node.
        sts_pod(0, created=ago(3600), changed=ago(3000)),
        # Elsewhere but not Running, or being deleted.
        sts_pod(0, node_name="worker-2", created=ago(50), changed=ago(40), phase="Pending"),
        sts_pod(0, node_name="worker-2", created=ago(50), changed=ago(40), terminating=True),
        # Created before the node went silent: not a replacement.
        sts_pod(0, node_name="worker-2", created=ago(3600), changed=ago(3000)),
        # No server stamp to time it by.
        sts_pod(0, node_name="worker-2", created=ago(50), changed=None),
        # Another StatefulSet's pod of the same name pattern.
        dataclasses.replace(
            sts_pod(0, node_name="worker-2", created=ago(50), changed=ago(40)), owner_name="x"
        ),
    )
    for pod in not_yet:
        decided = recovery.decide(measuring(held, (pod,)), policy(), NOW, NODE)
        assert decided.actions == (), pod


def test_deployment_pods_are_matched_by_owner_and_counted() -> None:
    held = incident(WEB, WEB)
    old = deploy_pod("old", node_name="worker-3", created=ago(7200), changed=ago(7000))
    one = deploy_pod("n1", node_name="worker-2", created=ago(90), changed=ago(70))
    two = deploy_pod("n2", node_name="worker-3", created=ago(90), changed=ago(50))
    # A later rollout's ReplicaSet is the same Deployment's.
    rolled = deploy_pod(
        "n3", node_name="worker-2", template_hash="77aa", created=ago(80), changed=ago(60)
    )
    other = deploy_pod(
        "z", deployment="api", node_name="worker-2", created=ago(90), changed=ago(65)
    )

    waiting = recovery.decide(measuring(held, (old, one, other)), policy(), NOW, NODE)
    assert waiting.actions == ()
    assert "1 of the 2 pod(s) of Deployment apps/web" in waiting.reasons[0].message

    decided = recovery.decide(measuring(held, (old, one, two, rolled)), policy(), NOW, NODE)
    (action,) = decided.actions
    assert isinstance(action, RecordRecoveryAction)
    # The steadiest two stand for the node's: 70 and 60 s ago.
    assert action.recovered_at == ago(60)
    assert action.seconds == 60.0
    assert action.words.startswith("Deployment pods running elsewhere 60 s after")


def test_every_remembered_pod_must_be_back_before_the_incident_is_counted() -> None:
    held = incident(DB0, HeldPod("apps", STATEFULSET, "db", 1), WEB)
    back = (
        sts_pod(0, node_name="worker-2", created=ago(90), changed=ago(80)),
        deploy_pod("n1", node_name="worker-2", created=ago(90), changed=ago(70)),
    )
    assert recovery.decide(measuring(held, back), policy(), NOW, NODE).actions == ()
    late = sts_pod(1, node_name="worker-3", created=ago(60), changed=ago(35))
    decided = recovery.decide(measuring(held, (*back, late)), policy(), NOW, NODE)
    (action,) = decided.actions
    assert isinstance(action, RecordRecoveryAction)
    assert action.recovered_at == ago(35)
    assert action.words.startswith("StatefulSet and Deployment pods running elsewhere 85 s")


def test_nothing_is_measured_twice_off_the_api_server_s_clock_paused_or_for_another_node() -> None:
    back = (sts_pod(0, node_name="worker-2", created=ago(90), changed=ago(80)),)
    measured = dataclasses.replace(incident(DB0), recovered_at=ago(80))
    cases = [
        measuring(measured, back),
        measuring(incident(DB0), back, clock=LOCAL_CLOCK),
        measuring(incident(DB0), None),
        measuring(incident(), back),
        measuring(incident(DB0, silent=None), back),
        measuring(dataclasses.replace(incident(DB0), phase=Phase.CLAIMED), back),
        dataclasses.replace(measuring(incident(DB0), back), node=fenced_node(uid="uid-new")),
    ]
    for case in cases:
        assert recovery.decide(case, policy(), NOW, NODE).actions == ()
    assert (
        recovery.decide(measuring(incident(DB0), back), policy(paused=True), NOW, NODE).actions
        == ()
    )


def test_a_node_unfenced_first_is_not_measured() -> None:
    """The entry goes with the fence: no incident is left to measure."""
    back = (sts_pod(0, node_name="worker-2", created=ago(90), changed=ago(80)),)
    unfenced = dataclasses.replace(facts(node(ready="True")), elsewhere=back)
    assert recovery.decide(unfenced, policy(), NOW, NODE).actions == ()


def test_the_words_say_what_was_not_remembered_and_a_fence_without_proof() -> None:
    held = dataclasses.replace(
        incident(DB0),
        held=HeldPods((DB0,), left_out=3),
        proof="no proof: inference alone (fencing.driver none)",
        power_off_sent_at=None,
    )
    back = (sts_pod(0, node_name="worker-2", created=ago(90), changed=ago(80)),)
    (action,) = recovery.decide(measuring(held, back), policy(), NOW, NODE).actions
    assert isinstance(action, RecordRecoveryAction)
    assert "; fenced at 60 s without power-off proof (1 pod(s);" in action.words
    assert action.words.endswith("3 more pod(s) the node held were not remembered")


def test_the_words_name_the_kind_of_proof_the_fencing_rule_had() -> None:
    back = (sts_pod(0, node_name="worker-2", created=ago(90), changed=ago(80)),)
    written = {"fencing": {"driver": "annotation"}}
    said = {
        name: recovery.decide(measuring(incident(DB0), back), policy(rule=rule), NOW, NODE)
        for name, rule in (("bmc", BMC), ("written", written))
    }
    assert "; fenced at 60 s on BMC proof (" in said["bmc"].reasons[0].message
    assert (
        "; fenced at 60 s on external fencing's written proof ("
        in said["written"].reasons[0].message
    )
