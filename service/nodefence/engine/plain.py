"""The guards in an operator's words: what holds a decision back, said without nodefence's
internal guard names (which only ``-o json`` shows), for ``explain`` and ``status``."""

from __future__ import annotations

from nodefence.engine.model import Decision, Reason

WORDS = {
    "ready": "the node is Ready",
    "not-ready-duration": "it has not been NotReady long enough yet",
    "lease": "its kubelet may still be running (its Lease was renewed recently)",
    "lease-fresh": "its kubelet Lease has not been renewed since it came back",
    "storm": "too many nodes are NotReady at once, which points at the network",
    "storm-cooldown": "a storm of NotReady nodes ended only recently",
    "fence-budget": "the fence budget is spent: as many nodes are fenced as the policy allows",
    "ready-fraction": "fencing it would leave too few nodes Ready",
    "control-plane-quorum": "fencing it would leave the control plane without a majority",
    "flap": "nodefence let go of it only recently, and it may be flapping",
    "foreign-taint": "an out-of-service taint nodefence did not apply is already on it",
    "healthy-delay": "it has not been Ready long enough yet",
    "boot-id": "it has not come back with a new boot ID",
    "terminating-pods": "pods are still Terminating on it",
    "volume-attachments": "volumes are still attached to it",
    "power-off": "there is no proof that its machine is off",
    "dry-run-power": "there is no proof that its machine is off (its BMC or agent was asked)",
    "machine-identity": "its BMC or fence agent is not shown to control this node's machine",
    "clock": "no reply of the API server dated the facts",
    "paused": "nodefence is paused",
    "silence": "an Alertmanager silence holds it",
    "exclusion": "the node is excluded (nodefence.io/exclude)",
    "rule": "no rule of the policy matches it",
    "approval": "a person's approval in Slack is needed",
    "escalation": "the power step failed and a person is asked",
    "fence-in-progress": "a fence of it is in progress",
    "ownership": "nodefence did not fence it",
    "alert": "the alert is not one nodefence handles",
    "node-label": "the alert names no node",
    "fence-record": "the fence record lost this fence's entry",
    "proof-contradicted": "its machine was back with its fence-time boot ID: the proof was false",
    "reboot": "it did not come back after its reboot",
}


def blocking(decision: Decision) -> Reason | None:
    """The guard that decides: the first that blocked."""
    return next((r for r in decision.reasons if not r.passed), None)


def words(reason: Reason) -> str:
    return WORDS.get(reason.guard, "a guard holds it back")
