"""Each incident's recovery time, measured by nodefence itself (``nodefence_recovery_seconds``).

An incident is measured from the node's last sign of life to the moment every pod it held that
a controller brings back (``engine.held_pods``: StatefulSet pods by owner and ordinal,
Deployment pods by owner and count) is Running on another node, and has stayed Running for
``STEADY_SECONDS``. Both ends are on the API server's clock (S11), never a kubelet's or
nodefence's own:

- the last sign of life is the Lease's latest renewal as the API server stamped it
  (``managedFields``), the very time the Lease guard judges (for a node without a Lease, the
  latest stamped write of its status), kept in the fence entry when the fence is claimed;
- a replacement is a pod created (``creationTimestamp``, stamped by the API server) at or after
  that moment, Running, not being deleted, on another node; the moment it counts from is the
  API server's stamp of its latest change (``managedFields``). For a pod that has stayed
  Running, that is when it last changed, at or after it started Running: the measure is an
  upper bound that no kubelet clock can shorten, and a pod that keeps changing (restarting,
  flapping Ready) is not counted until it has held still.

The reconcile pass, which every receiver runs, measures each fenced node whose incident is not
measured yet (``decide``): one action writes the moment into the fence entry on the record's
resourceVersion, and only a write that finds it unmeasured counts it, so several replicas
count an incident once. Nothing is measured:

- for a node unfenced (or released) before its pods were Running elsewhere for the steady
  time: the entry that remembers the incident is gone with the fence;
- for a node that held no StatefulSet or Deployment pod: nothing comes back elsewhere;
- while a remembered pod's workload was scaled down or deleted: it never comes back, and the
  incident stays unmeasured until its fence ends;
- in a dry run (S8): the measurement is a write, so it is not made;
- on any clock but the API server's, or while nodefence is paused.

This module is pure: facts in, decision out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodefence.engine import drivers
from nodefence.engine.drivers import Proof
from nodefence.engine.held_pods import (
    DEPLOYMENT,
    STATEFULSET,
    HeldPod,
    HeldPods,
    bounded,
)
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    Decision,
    Facts,
    LeaseFacts,
    NodeFacts,
    PodFacts,
    Reason,
    RecordRecoveryAction,
    Verdict,
)
from nodefence.engine.record import FenceEntry, Phase
from nodefence.engine.wording import duration, instant
from nodefence.policy import Policy, Rule

# The measurement is no guard: what it says is the decision's own verdict.
GUARD = "verdict"
# How long every replacement must have stayed Running, unchanged, before the incident is
# counted: a pod that starts and then crashes or is evicted again has not brought the service
# back. 30 s is longer than a container's first restart back-off (10 s) and a default readiness
# probe's first verdicts, and short beside the minutes a recovery takes, so the measure is
# taken within a reconcile period or two of the recovery itself.
STEADY_SECONDS = 30.0
# Pods in these phases have ended: nothing is waiting for them to come back.
_ENDED = ("Succeeded", "Failed")


def last_sign_of_life(node: NodeFacts, lease: LeaseFacts | None) -> datetime | None:
    """When the API server last heard from the node's kubelet, on its own clock: the Lease's
    latest stamped renewal (what the Lease guard, S2, times), or for a node without a Lease the
    latest stamped write of its status."""
    if lease is not None:
        return lease.server_renewed
    return node.status_written


def _statefulset_ordinal(pod: PodFacts) -> int | None:
    """The pod's ordinal when it is ``<statefulset>-<ordinal>`` of its owning StatefulSet."""
    owner = pod.owner_name or ""
    rest = pod.name[len(owner) + 1 :] if pod.name.startswith(owner + "-") else ""
    if not owner or not rest.isascii() or not rest.isdigit():
        return None
    if rest != "0" and rest.startswith("0"):
        return None
    return int(rest)


def deployment_of(pod: PodFacts) -> str | None:
    """The Deployment a pod belongs to: its ReplicaSet is named ``<deployment>-<hash>`` with the
    pod's ``pod-template-hash``, as the Deployment controller names them; None otherwise."""
    owner = pod.owner_name or ""
    suffix = "-" + pod.template_hash
    if pod.owner_kind != "ReplicaSet" or not pod.template_hash or not owner.endswith(suffix):
        return None
    return owner[: -len(suffix)] or None


def _held(pod: PodFacts) -> HeldPod | None:
    if pod.owner_kind == STATEFULSET and pod.owner_name:
        ordinal = _statefulset_ordinal(pod)
        if ordinal is not None:
            return HeldPod(pod.namespace, STATEFULSET, pod.owner_name, ordinal)
        return None
    deployment = deployment_of(pod)
    if deployment is not None:
        return HeldPod(pod.namespace, DEPLOYMENT, deployment)
    return None


def held_pods(node: str, pods: Iterable[PodFacts]) -> HeldPods:
    """The pods on ``node`` that a controller brings back elsewhere, bounded
    (``held_pods.bounded``). Pods already being deleted count too: on a dead node that is how
    they wait for the fence."""
    mine = sorted(
        (p for p in pods if p.node_name == node and p.phase not in _ENDED),
        key=lambda p: (p.namespace, p.name),
    )
    return bounded(h for h in map(_held, mine) if h is not None)


def wanted(entry: FenceEntry) -> bool:
    """Whether the entry's incident is still to be measured: fenced, remembering its node's last
    sign of life and at least one pod, and not measured yet."""
    return (
        entry.phase is Phase.FENCED
        and entry.recovered_at is None
        and entry.silent_since is not None
        and entry.held.count > 0
    )


@dataclass(frozen=True)
class Recovered:
    """Every remembered pod Running elsewhere since ``at``, ``seconds`` after ``silent_since``."""

    at: datetime
    seconds: float
    silent_since: datetime
    pods: int


@dataclass(frozen=True)
class Waiting:
    why: str


def _replacement(pod: PodFacts, node: str, since: datetime) -> bool:
    return (
        bool(pod.node_name)
        and pod.node_name != node
        and pod.phase == "Running"
        and not pod.terminating
        and pod.created is not None
        and pod.created >= since
        and pod.changed is not None
    )


def judge(entry: FenceEntry, pods: Iterable[PodFacts], now: datetime) -> Recovered | Waiting:
    """Whether every pod ``entry`` remembers is Running elsewhere and has been for
    ``STEADY_SECONDS``, on the API server's clock ``now``; ``pods``: those of its namespaces."""
    silent = entry.silent_since
    if silent is None or not entry.held.count:
        return Waiting("the fence entry remembers no pod to come back elsewhere")
    # creationTimestamp is in whole seconds: a pod created in the second the node went silent
    # counts.
    since = silent.replace(microsecond=0)
    fresh = [p for p in pods if _replacement(p, entry.node, since)]
    moments: list[datetime] = []
    for held in entry.held.statefulset_pods():
        name = f"{held.owner}-{held.ordinal}"
        pod = next(
            (
                p
                for p in fresh
                if (p.namespace, p.name, p.owner_kind, p.owner_name)
                == (held.namespace, name, STATEFULSET, held.owner)
            ),
            None,
        )
        if pod is None or pod.changed is None:
            return Waiting(f"StatefulSet pod {held.namespace}/{name} is not Running elsewhere yet")
        moments.append(pod.changed)
    for (namespace, deployment), count in sorted(entry.held.deployments().items()):
        running = sorted(
            p.changed
            for p in fresh
            if p.changed is not None and p.namespace == namespace and deployment_of(p) == deployment
        )
        if len(running) < count:
            return Waiting(
                f"{len(running)} of the {count} pod(s) of Deployment {namespace}/{deployment} "
                "the node held run elsewhere"
            )
        # The steadiest of them stand for the node's.
        moments.extend(running[:count])
    last = max(moments)
    steady = now - last
    if steady < timedelta(seconds=STEADY_SECONDS):
        return Waiting(
            f"every pod the node held is Running elsewhere, the last since {instant(last)}: "
            f"counted once it has stayed so for {duration(STEADY_SECONDS)}"
        )
    return Recovered(last, max(0.0, (last - silent).total_seconds()), silent, len(moments))


def _proof_words(entry: FenceEntry, rule: Rule | None) -> str:
    """What the fence stood on, in a few words: the driver's kind of proof (``engine.drivers``)
    of the rule that fenced the node, or that there was none."""
    if not entry.proof:
        return "with no proof recorded"
    if entry.proof.startswith(("no proof", "no power-off proof")):
        # Inference alone, or a person's approval in place of a proof (an approval rule, an
        # escalation a person approved): the record says which.
        approved = " (a person approved it)" if entry.approval else ""
        return f"without power-off proof{approved}"
    fencing = rule.fencing if rule is not None else None
    if fencing is None:
        return "on the proof its record holds"
    kind = drivers.lookup(fencing.driver)
    if kind.proof is Proof.WRITTEN:
        return "on external fencing's written proof"
    if kind.powers:
        return "on BMC proof"
    return f"on power-off proof read from the machine ({fencing.driver})"


def words(entry: FenceEntry, recovered: Recovered, rule: Rule | None = None) -> str:
    """The Event's sentence: how long the workloads were away, when the fence came in that
    time, and on what."""
    kinds = " and ".join(entry.held.kinds())
    out = f"{kinds} pods running elsewhere {recovered.seconds:.0f} s after the node went silent"
    if entry.fenced_at is not None:
        fenced = max(0.0, (entry.fenced_at - recovered.silent_since).total_seconds())
        out += f"; fenced at {fenced:.0f} s {_proof_words(entry, rule)}"
    out += (
        f" ({recovered.pods} pod(s); the node's last sign of life at "
        f"{instant(recovered.silent_since)}, the last of them Running since "
        f"{instant(recovered.at)}, both on the API server's clock)"
    )
    if entry.held.left_out:
        out += f"; {entry.held.left_out} more pod(s) the node held were not remembered"
    return out


def decide(facts: Facts, policy: Policy, now: datetime, node_name: str) -> Decision:
    """The reconcile pass's measurement of node ``node_name``'s incident, on ``facts`` that
    carry the pods of its namespaces (``Facts.elsewhere``). Only a measurement is an action;
    every other outcome is a passing reason, so waiting writes nothing and says nothing on the
    Node."""
    entry = facts.record.entry(node_name)
    node = facts.node

    def finish(message: str, action: RecordRecoveryAction | None = None) -> Decision:
        return Decision(
            verdict=Verdict.NOOP,
            node=node_name,
            reasons=(Reason(GUARD, True, message),),
            actions=(action,) if action is not None else (),
            dry_run=policy.dry_run,
            alertname=entry.alertname if entry is not None else "",
            fingerprint=entry.fingerprint if entry is not None else "",
            status="reconcile",
            rule=entry.rule if entry is not None else None,
            now=now,
        )

    if entry is None or not wanted(entry):
        return finish("no incident of this node is waiting to be measured")
    if node is None or node.uid != entry.uid:
        return finish("the fenced node object is gone; its incident is not measured")
    if facts.clock != API_SERVER_CLOCK:
        return finish("the API server's clock is unknown: recovery is not measured on another")
    if policy.paused or facts.cluster.paused_reason:
        return finish("nodefence is paused: recovery is measured once it resumes")
    if facts.elsewhere is None:
        return finish("the pods of the node's namespaces were not read")
    judged = judge(entry, facts.elsewhere, now)
    if isinstance(judged, Waiting):
        return finish(f"recovery not measured yet: {judged.why}")
    said = words(entry, judged, policy.rule_named(entry.rule))
    action = RecordRecoveryAction(node_name, entry.uid, judged.at, judged.seconds, said)
    return finish(said, action)
