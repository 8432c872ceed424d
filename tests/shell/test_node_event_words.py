"""The Event an operator reads in ``kubectl describe node``: what survives the API server's
1,024-character cut of a fence's message, and Normal against Warning for a refusal."""

from __future__ import annotations

from datetime import UTC, datetime

from nodefence.actions.executor import ActionResult, Outcome
from nodefence.engine.model import Decision, Reason, Verdict
from nodefence.kube.events import MAX_MESSAGE
from nodefence.shell.report import node_event

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
PROOF = (
    "all guards passed: fencing node compute02 with the out-of-service taint (NoExecute); "
    "proof: redfish https://bmc-compute02/redfish/v1/Systems/1 reported Off (after nodefence "
    "powered it off, read back at 2026-12-05T03:00:00Z); identity matched (system UUID "
    "4c4c4544-0042-3510-8052-b4c04f4e3232)"
)
VOLUMES = "VolumeAttachment csi-" + "0123456789abcdef" * 60 + " is still attached"


def fence(*reasons: Reason) -> Decision:
    return Decision(Verdict.FENCE, "compute02", reasons, status="firing", now=NOW)


def test_the_proof_and_identity_survive_the_cut_whatever_the_volumes_say() -> None:
    decision = fence(
        Reason("ready", True, "Ready is Unknown"),
        Reason("verdict", True, PROOF),
        Reason("volumes", False, VOLUMES),
    )
    results = [
        ActionResult("purge", "openstack/mariadb-server-1", Outcome.DONE, "deleted"),
        ActionResult("purge", "openstack/ingress-0", Outcome.ALREADY, "pod already gone"),
    ]
    event = node_event(decision, results, purged=1, fenced=True)
    assert event is not None
    reason, message, warning = event
    assert reason == "NodeFenced"
    assert warning
    kept = message[:MAX_MESSAGE]
    assert "reported Off" in kept
    assert "identity matched (system UUID 4c4c4544-0042-3510-8052-b4c04f4e3232)" in kept
    assert "1 pods purged by nodefence, 1 already deleted by Kubernetes' pod garbage" in kept
    # The headline of a fence that left volumes attached says so; one that left nothing
    # undone is the verdict's words, not the last guard's.
    assert decision.summary == VOLUMES
    clean = fence(Reason("verdict", True, PROOF), Reason("volumes", True, "no volume is attached"))
    assert clean.summary == PROOF


def test_a_wait_is_normal_and_a_spent_budget_a_warning() -> None:
    def refused(guard: str) -> Decision:
        return Decision(
            Verdict.NOOP,
            "compute02",
            (Reason("ready", True, "Ready is Unknown"), Reason(guard, False, "held")),
            status="firing",
            now=NOW,
        )

    waiting = node_event(refused("not-ready-duration"), [], 0, fenced=False)
    full = node_event(refused("fence-budget"), [], 0, fenced=False)
    assert waiting == ("FenceRefused", "held", False)
    assert full == ("FenceRefused", "held", True)
