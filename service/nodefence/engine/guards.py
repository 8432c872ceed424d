"""The guards: each answers one safety question about live facts and says why, in words.

Every guard returns a :class:`Reason` whether it passes or blocks, because the decision record
is what an operator reads to learn why nodefence did (or did not) act. Guards never raise and
treat missing evidence as a reason to block the risky direction.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from nodefence.engine import power_waits
from nodefence.engine.drivers import Proof
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.guard_kinds import (
    ALERT_WAIT,
    ATTACHMENTS,
    BOOT_ID,
    BUDGET,
    CLOCK,
    CONTROL_PLANE,
    FLAP,
    FOREIGN_TAINT,
    HEALTHY_DELAY,
    LEASE,
    LEASE_FRESH,
    NOT_READY_DURATION,
    OWN_NODE,
    POWER_OFF,
    READY,
    READY_FRACTION,
    STORM,
    STORM_COOLDOWN,
    TERMINATING_PODS,
)
from nodefence.engine.model import (
    API_SERVER_CLOCK,
    AlertEvent,
    ClusterFacts,
    Facts,
    LeaseFacts,
    NodeFacts,
    PodFacts,
    Reason,
    VolumeAttachmentFacts,
)
from nodefence.engine.readiness import is_ready as condition_is_ready
from nodefence.engine.readiness import node_is_ready, node_takes_workloads
from nodefence.engine.record import FenceEntry, FenceRecord, Release
from nodefence.engine.wording import duration, instant
from nodefence.policy import ClusterPolicy, Rule

_MAX_LISTED = 5


def _pass(guard: str, message: str) -> Reason:
    return Reason(guard, True, message)


def _block(guard: str, message: str, until: datetime | None = None) -> Reason:
    return Reason(guard, False, message, until)


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    more = len(names) - _MAX_LISTED
    return f"{shown} and {more} more" if more > 0 else shown


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.0f}%"


def ready_is_not_true(node: NodeFacts) -> Reason:
    """S1: a node that reports Ready is alive; fencing it would let its volumes attach twice."""
    cond = node.ready
    if cond is None:
        return _pass(READY, f"Node {node.name} reports no Ready condition; counted as NotReady")
    if condition_is_ready(cond):
        since = f" since {instant(cond.last_transition)}" if cond.last_transition else ""
        return _block(READY, f"Node {node.name} is Ready (Ready=True{since}); never fenced")
    detail = f" ({cond.reason})" if cond.reason else ""
    return _pass(READY, f"Node {node.name} is NotReady: Ready is {cond.status}{detail}")


def trusted_clock(clock: str) -> Reason:
    """S11: liveness is judged on the API server's clock alone. A reply without a ``Date``
    leaves no trustworthy "now", and then no node is judged dead."""
    if clock != API_SERVER_CLOCK:
        return _block(
            CLOCK,
            f"the API server's clock is unknown (its replies carried no Date header; now is "
            f"from {clock}): liveness cannot be judged, so nothing is fenced",
        )
    return _pass(CLOCK, "liveness judged on the API server's clock (the Date of its replies)")


def not_own_node(node: NodeFacts, own_node: str | None) -> Reason:
    """A replica whose kubelet died with its node is often still running (a hung kubelet, a
    partition that spares the API server) and sees the node's fence come due. Its own power-off
    would stop it between the claim and the taint, and the fence would wait for the claim to time
    out; another replica, on a live node, fences it at once."""
    if own_node is not None and own_node == node.name:
        return _block(
            OWN_NODE,
            f"this replica runs on node {node.name} (NODEFENCE_NODE_NAME): its power-off would "
            "stop it halfway through the fence, which is left to a replica on another node",
        )
    return _pass(OWN_NODE, f"this replica does not run on node {node.name}")


def _silent_since(lease: LeaseFacts | None) -> datetime | None:
    return lease.server_renewed if lease is not None else None


def not_ready_long_enough(
    node: NodeFacts, lease: LeaseFacts | None, rule: Rule, now: datetime, facts: Facts
) -> Reason:
    """How long the node has been both NotReady and silent, on the API server's clock.

    ``lastTransitionTime`` was stamped by whoever wrote the condition (a kubelet's clock may be
    minutes off), so the duration is capped by how long ago the API server last saw the kubelet
    renew its Lease: a skewed stamp cannot make a node look down for longer than it was silent.
    """
    cond = node.ready
    required = duration(rule.min_not_ready_seconds)
    if cond is None or cond.last_transition is None:
        return _block(
            NOT_READY_DURATION,
            "Ready condition has no lastTransitionTime, so how long the node has been NotReady "
            f"is unknown ({required} required)",
        )
    status = cond.status
    age = now - cond.last_transition
    since = instant(cond.last_transition)
    detail = f"since {since}"
    silent = _silent_since(lease)
    if silent is not None and now - silent < age:
        age = now - silent
        detail += f"; the API server last saw its Lease renewed at {instant(silent)}"
    if age < timedelta(seconds=rule.min_not_ready_seconds):
        shorter = (
            f"Ready has been {status} for {duration(age)} on the API server's clock ({detail})"
        )
        off = power_waits.off_here(node, facts, rule)
        if off is not None:
            return _pass(NOT_READY_DURATION, f"{shorter}; the {required} minimum is waived: {off}")
        return _block(
            NOT_READY_DURATION,
            f"{shorter}, less than the {required} required{power_waits.kept(node, facts, rule)}",
            now - age + timedelta(seconds=rule.min_not_ready_seconds),
        )
    return _pass(
        NOT_READY_DURATION,
        f"Ready has been {status} for {duration(age)} on the API server's clock ({detail}), "
        f"at least the {required} required",
    )


def alert_waited(
    event: AlertEvent,
    node: NodeFacts,
    facts: Facts,
    *,
    rule: Rule,
    cluster: ClusterPolicy,
    now: datetime,
) -> Reason | None:
    """For a node judged without an alert (``engine.fallback``): whether the wait for one is
    over. The fallback gives the alert path ``cluster.fallback_after_seconds`` from when the node
    turned NotReady (on the API server's clock) to bring the node; a node whose machine reads
    Off has nothing to wait for (``engine.power_waits``). None for a decision an alert brought."""
    if not event.fallback or event.starts_at is None:
        return None
    after = cluster.fallback_after_seconds
    end = event.starts_at + timedelta(seconds=after)
    since = instant(event.starts_at)
    waited = f"no alert came for node {node.name} in the {duration(after)} since {since}"
    if now >= end:
        return _pass(ALERT_WAIT, f"{waited} (cluster.fallback_after_seconds)")
    waiting = (
        f"nodefence waits for an alert for node {node.name} until {instant(end)} "
        f"(cluster.fallback_after_seconds {duration(after)} from {since})"
    )
    off = power_waits.off_here(node, facts, rule)
    if off is not None:
        return _pass(ALERT_WAIT, f"{waiting} no longer: {off}")
    return _block(ALERT_WAIT, f"{waiting}{power_waits.kept(node, facts, rule)}", end)


def _kubelet_stamp(lease: LeaseFacts) -> str:
    if lease.renew_time is None:
        return ""
    return f"; its renewTime, from the kubelet's own clock, says {instant(lease.renew_time)}"


def lease_is_stale(node: NodeFacts, lease: LeaseFacts | None, rule: Rule, now: datetime) -> Reason:
    """S2: a renewed Lease means a kubelet is still running there, whatever the Ready condition
    says (a partition between node and API server can look exactly like a dead node).

    S11: the renewal is timed by the API server's stamp (``managedFields[].time``) against the
    API server's ``Date``; the kubelet's ``renewTime`` is its own clock and proves nothing.
    """
    where = f"kube-node-lease/{node.name}"
    window = duration(rule.lease_staleness_seconds)
    if lease is None:
        if rule.fence_without_lease:
            return _pass(LEASE, f"no kubelet Lease {where}; the rule allows fencing without")
        return _block(
            LEASE,
            f"no kubelet Lease {where}, so the kubelet's death cannot be confirmed "
            "(the rule's fence_without_lease is off)",
        )
    stamped = lease.server_renewed
    if stamped is None:
        return _block(
            LEASE,
            f"kubelet Lease {where} carries no time stamped by the API server (managedFields), "
            "so its last renewal cannot be timed on a trustworthy clock",
        )
    age = now - stamped
    renewed = instant(stamped)
    kubelet = _kubelet_stamp(lease)
    if age < timedelta(seconds=rule.lease_staleness_seconds):
        return _block(
            LEASE,
            f"the API server saw kubelet Lease {where} renewed {duration(max(age, timedelta()))} "
            f"ago (at {renewed}), within the {window} staleness window: the kubelet may still "
            f"be running{kubelet}",
            stamped + timedelta(seconds=rule.lease_staleness_seconds),
        )
    return _pass(
        LEASE,
        f"the API server last saw kubelet Lease {where} renewed {duration(age)} ago "
        f"(at {renewed}), longer than the {window} staleness window{kubelet}",
    )


def no_storm(cluster: ClusterFacts, policy: ClusterPolicy) -> Reason:
    """Many NotReady nodes at once point at the network or the control plane, not at dead
    machines; fencing then would evict healthy workloads en masse."""
    total = cluster.total_nodes
    if total <= 0:
        return _block(STORM, "the cluster facts count no nodes; cannot judge a NotReady storm")
    not_ready = max(0, total - cluster.ready_nodes)
    fraction = not_ready / total
    threshold = _percent(policy.storm_not_ready_fraction)
    if fraction > policy.storm_not_ready_fraction:
        return _block(
            STORM,
            f"{not_ready} of {total} nodes ({_percent(fraction)}) are NotReady, more than the "
            f"{threshold} storm threshold: likely a network or control-plane problem; "
            "fencing nothing",
        )
    return _pass(
        STORM,
        f"{not_ready} of {total} nodes are NotReady, within the {threshold} storm threshold",
    )


def storm_cooled_down(cluster: ClusterFacts, policy: ClusterPolicy, now: datetime) -> Reason:
    """A storm is not over when the nodes come back: flapping links take nodes down again. Nodes
    that became Ready within the cooldown count as part of the storm, so nodefence keeps
    refusing until the cluster has been calm for ``storm_cooldown_seconds``."""
    total = cluster.total_nodes
    window = timedelta(seconds=policy.storm_cooldown_seconds)
    if total <= 0 or policy.storm_cooldown_seconds == 0:
        return _pass(STORM_COOLDOWN, "no storm cooldown applies")
    # 0 <= now - since < window, compared as instants: one comparison per node instead of a
    # subtraction and two (ten times cheaper, and every alert counts every Ready node).
    start = now - window
    recovered = sum(1 for since in cluster.ready_since if start < since <= now)
    not_ready = max(0, total - cluster.ready_nodes)
    fraction = (not_ready + recovered) / total
    if recovered and fraction > policy.storm_not_ready_fraction:
        return _block(
            STORM_COOLDOWN,
            f"{recovered} node(s) became Ready within the last "
            f"{duration(policy.storm_cooldown_seconds)} while {not_ready} are NotReady "
            f"({_percent(fraction)} of {total} nodes together, more than the "
            f"{_percent(policy.storm_not_ready_fraction)} storm threshold): a storm just ended; "
            "fencing nothing until it has been calm for the cooldown",
        )
    return _pass(
        STORM_COOLDOWN,
        f"no storm within the last {duration(policy.storm_cooldown_seconds)} "
        f"({recovered} node(s) recovered in that time)",
    )


NO_PROOF = "no proof"


def powered_off(
    node: NodeFacts, lease: LeaseFacts | None, power: PowerEvidence | None, rule: Rule
) -> Reason:
    """S10: a taint needs positive proof that the machine is off. A node that only lost its
    network still runs its pods and writes to its volumes, and nothing the API server shows
    can tell it from a dead one; only the rule's explicit ``fencing.driver: none`` waives it."""
    fencing = rule.fencing
    if fencing is None:
        return _block(
            POWER_OFF,
            f"rule {rule.name!r} has no fencing section, so there is no proof the machine is "
            "off and nodefence does not fence on inference alone: configure fencing.driver "
            "(redfish or ipmi through the BMC inventory, annotation or http), ask a person "
            "(approval: slack), or accept the risk explicitly with fencing.driver: none",
        )
    if fencing.proof is Proof.NONE:
        return _pass(
            POWER_OFF,
            f"{NO_PROOF}: rule {rule.name!r} chose fencing.driver none and fences on inference "
            "alone (NotReady and a Lease silent on the API server's clock); the machine may "
            "still be running",
        )
    if fencing.proof is Proof.WRITTEN:
        return _written_proof(node, lease, power, fencing.annotation)
    if power is None:
        return _block(POWER_OFF, "the rule requires proof the machine is off; none was obtained")
    when = f" at {instant(power.at)}" if power.at is not None else ""
    if power.state == "off":
        read = "read back after nodefence powered it off" if power.action_sent else "read"
        return _pass(POWER_OFF, f"{power.source} reports the machine is Off ({read}{when})")
    detail = f" ({power.detail})" if power.detail else ""
    return _block(
        POWER_OFF,
        f"the rule requires proof the machine is off; {power.source} answered "
        f"{power.state}{detail}{when}: no proof, no taint",
    )


def _last_sign_of_life(node: NodeFacts, lease: LeaseFacts | None) -> tuple[datetime, str] | None:
    """When the API server last heard from the kubelet, on its own clock: the Lease's latest
    stamped renewal, or for a node without a Lease the latest write of its status."""
    if lease is not None and lease.server_renewed is not None:
        return lease.server_renewed, f"renew kubelet Lease kube-node-lease/{node.name}"
    if lease is None and node.status_written is not None:
        return node.status_written, "write the node's status"
    return None


def _written_proof(
    node: NodeFacts, lease: LeaseFacts | None, power: PowerEvidence | None, annotation: str
) -> Reason:
    """S12: the proof is read from nodefence's namespace, never from the Node, whose own
    credentials could write "off" on a machine that is running. A proof counts only if the
    API server stamped its write after the node's last sign of life: an "off" left from an
    earlier incident says nothing about the machine that has renewed its Lease since."""
    if power is None:
        return _block(POWER_OFF, "the rule requires proof the machine is off; none was read")
    own = node.annotations.get(annotation, "").strip().lower()
    unheeded = (
        f"; the Node's own annotation {annotation}={own} is not proof, since the node's "
        "credentials can write it"
        if own
        else ""
    )
    if power.state != "off":
        return _block(
            POWER_OFF,
            f"the rule requires proof the machine is off; {power.source}: {power.detail}{unheeded}",
        )
    if power.at is None:
        return _block(
            POWER_OFF,
            f"{power.source} says {power.detail} but carries no time stamped by the API server, "
            f"so it cannot be shown to postdate the node's last sign of life{unheeded}",
        )
    written = instant(power.at)
    life = _last_sign_of_life(node, lease)
    if life is None:
        return _block(
            POWER_OFF,
            f"{power.source} says {power.detail} (written {written}), but the node's last sign "
            "of life carries no time stamped by the API server to compare it with",
        )
    last, what = life
    if power.at <= last:
        return _block(
            POWER_OFF,
            f"{power.source} says {power.detail}, but it was written at {written}, not after "
            f"the API server last saw the node {what} at {instant(last)}: a proof from before "
            "the machine went silent is not proof it is off now; external fencing must write "
            "it again (re-create the ConfigMap: writing the same value again changes nothing, "
            "so the API server does not stamp it anew)",
        )
    return _pass(
        POWER_OFF,
        f"external fencing says the machine is off ({power.source}: {power.detail}, "
        f"written at {written}, after the API server last saw the node {what} at "
        f"{instant(last)}); it is only as trustworthy as whoever may write ConfigMaps in "
        "nodefence's namespace",
    )


def within_fence_budget(
    node: NodeFacts,
    record: FenceRecord,
    policy: ClusterPolicy,
    tainted: tuple[str, ...] = (),
) -> Reason:
    """S3: the number of nodes fenced at once is bounded, this node aside if already counted.
    The count is the fence record's, and the claim that spends a slot is written on the record
    version this was judged on, so no two replicas can spend the last slot. Every other node
    carrying an out-of-service taint (``tainted``) counts too, whatever the record says: an
    admin's hand-fenced node has moved its workloads just the same, and a record that lost an
    entry (deleted, restored from an old copy) must not free the slot of a taint still on."""
    held = set(record.holders) - {node.name}
    outside = sorted(set(tainted) - held - {node.name})
    others = sorted(held)
    spent = len(others) + len(outside)
    limit = policy.max_fenced_nodes
    listed = f" ({_listing(others)})" if others else ""
    extra = (
        f" and {len(outside)} other node(s) carrying an out-of-service taint outside "
        f"nodefence's record ({_listing(outside)})"
        if outside
        else ""
    )
    if spent >= limit:
        return _block(
            BUDGET,
            f"{len(others)} node(s) already fenced by nodefence{listed}{extra}; "
            f"the budget allows at most {limit}",
        )
    return _pass(
        BUDGET,
        f"{len(others)} other node(s) fenced by nodefence{extra}; the budget allows {limit}",
    )


def ready_fraction_kept(node: NodeFacts, cluster: ClusterFacts, policy: ClusterPolicy) -> Reason:
    """S3: workloads moved off a fenced node land on the Ready rest, which must be able to
    carry them."""
    total = cluster.total_nodes
    if total <= 0:
        return _block(READY_FRACTION, "the cluster facts count no nodes; cannot judge capacity")
    capacity = (
        cluster.ready_nodes if cluster.schedulable_ready is None else cluster.schedulable_ready
    )
    remaining = max(0, capacity - (1 if node_takes_workloads(node) else 0))
    fraction = remaining / total
    minimum = _percent(policy.min_ready_fraction)
    if fraction < policy.min_ready_fraction:
        return _block(
            READY_FRACTION,
            f"only {remaining} of {total} nodes ({_percent(fraction)}) would remain Ready "
            f"and schedulable, below the required {minimum}",
        )
    return _pass(
        READY_FRACTION,
        f"{remaining} of {total} nodes ({_percent(fraction)}) would remain Ready and "
        f"schedulable, at least the required {minimum}",
    )


def control_plane_quorum(
    node: NodeFacts, cluster: ClusterFacts, record: FenceRecord, policy: ClusterPolicy
) -> Reason | None:
    """etcd and the API server need a majority of control-plane members; fencing one must not
    be the step that loses it. Returns None for worker nodes (the guard does not apply)."""
    if not node.is_control_plane:
        return None
    if not policy.control_plane_quorum:
        return _pass(CONTROL_PLANE, "control-plane quorum guard is turned off by the policy")
    fenced = sorted(set(record.control_plane_holders) - {node.name})
    if fenced:
        return _block(
            CONTROL_PLANE,
            f"control-plane node(s) {_listing(fenced)} already fenced; "
            "never two control-plane nodes at once",
        )
    total = cluster.control_plane_total
    if total <= 0:
        return _block(
            CONTROL_PLANE, "control-plane node counts are unavailable; cannot confirm quorum"
        )
    remaining = max(0, cluster.control_plane_ready - (1 if node_is_ready(node) else 0))
    if remaining * 2 <= total:
        return _block(
            CONTROL_PLANE,
            f"only {remaining} of {total} control-plane nodes would remain Ready, not a majority",
        )
    return _pass(
        CONTROL_PLANE,
        f"{remaining} of {total} control-plane nodes would remain Ready, a majority",
    )


def not_flapping(release: Release | None, rule: Rule, now: datetime) -> Reason:
    """A node released recently and failing again is unstable; fencing it in a loop would move
    its workloads back and forth. The release time is the record's, not an annotation."""
    if release is None:
        return _pass(FLAP, "no earlier release of this node is recorded")
    age = now - release.at
    window = duration(rule.flap_window_seconds)
    when = instant(release.at)
    why = f" ({release.why})" if release.why else ""
    if age < timedelta(seconds=rule.flap_window_seconds):
        return _block(
            FLAP,
            f"nodefence let go of this node {duration(age)} ago (at {when}{why}), within the "
            f"{window} flap window: it may be flapping",
            release.at + timedelta(seconds=rule.flap_window_seconds),
        )
    return _pass(
        FLAP, f"last released {duration(age)} ago (at {when}), outside the {window} flap window"
    )


def no_foreign_taint(node: NodeFacts, ours: bool) -> Reason:
    """S4 on the way in: an administrator's out-of-service taint is theirs; taking it over
    would later let nodefence remove it."""
    taint = node.out_of_service_taint
    if taint is not None and not ours:
        return _block(
            FOREIGN_TAINT,
            f"Node {node.name} already has the out-of-service taint ({taint.effect}) and "
            "nodefence did not apply it; it is left to whoever did",
        )
    return _pass(FOREIGN_TAINT, f"Node {node.name} has no out-of-service taint yet")


def healthy_long_enough(node: NodeFacts, entry: FenceEntry, rule: Rule, now: datetime) -> Reason:
    """S5: a node that just turned Ready may fail again at once; wait before releasing it.

    The wait counts from the later of the Ready condition's lastTransitionTime and the moment
    nodefence first saw it Ready (recorded on the API server's clock): a kubelet whose clock
    runs behind stamps an old transition, and must not shorten the delay by it.
    """
    cond = node.ready
    required = duration(rule.healthy_delay_seconds)
    if cond is None or not condition_is_ready(cond):
        status = "missing" if cond is None else cond.status
        return _block(HEALTHY_DELAY, f"Node {node.name} is not Ready (Ready is {status})")
    seen = entry.ready_seen_at
    if seen is None or entry.ready_transition != cond.last_transition:
        return _block(
            HEALTHY_DELAY,
            f"Node {node.name} is Ready; nodefence first sees it so now ({instant(now)}), and "
            f"the {required} healthy delay counts from here",
            now + timedelta(seconds=rule.healthy_delay_seconds),
        )
    age = now - seen
    detail = f"first seen Ready at {instant(seen)}"
    if cond.last_transition is not None and now - cond.last_transition < age:
        age = now - cond.last_transition
        detail = f"Ready since {instant(cond.last_transition)}"
    if age < timedelta(seconds=rule.healthy_delay_seconds):
        return _block(
            HEALTHY_DELAY,
            f"Ready for only {duration(age)} on the API server's clock ({detail}), less than "
            f"the {required} healthy delay",
            now - age + timedelta(seconds=rule.healthy_delay_seconds),
        )
    return _pass(
        HEALTHY_DELAY,
        f"Ready for {duration(age)} on the API server's clock ({detail}), at least the "
        f"{required} healthy delay",
    )


def lease_is_fresh(node: NodeFacts, lease: LeaseFacts | None, rule: Rule, now: datetime) -> Reason:
    """The kubelet must be heard from recently before its node gets workloads back, timed by
    the API server's own stamp on the Lease."""
    where = f"kube-node-lease/{node.name}"
    window = timedelta(seconds=rule.lease_staleness_seconds)
    stamped = lease.server_renewed if lease is not None else None
    if stamped is None:
        return _block(
            LEASE_FRESH,
            f"no renewal of kubelet Lease {where} stamped by the API server; the kubelet is not "
            "confirmed",
        )
    if now - stamped > window:
        return _block(
            LEASE_FRESH,
            f"the API server last saw kubelet Lease {where} renewed at {instant(stamped)}, not "
            f"within the {duration(window)} window",
        )
    return _pass(
        LEASE_FRESH,
        f"the API server saw kubelet Lease {where} renewed at {instant(stamped)}: the kubelet "
        "is back",
    )


def new_boot_id(node: NodeFacts, entry: FenceEntry, rule: Rule) -> Reason:
    """S5 reboot evidence: the same bootID means the machine never restarted, so whatever
    stopped it may still hold its volumes."""
    if not rule.needs_new_boot_id:
        return _pass(BOOT_ID, "the rule does not require a new boot ID")
    if not node.boot_id:
        return _block(BOOT_ID, "node reports no boot ID; a reboot cannot be confirmed")
    if not entry.boot_id:
        return _block(BOOT_ID, "the fence record holds no boot ID from fence time to compare with")
    if node.boot_id == entry.boot_id:
        return _block(
            BOOT_ID,
            f"boot ID {node.boot_id} is the one recorded at fence time: the node has not rebooted",
        )
    return _pass(BOOT_ID, f"boot ID changed since fence time ({entry.boot_id} → {node.boot_id})")


def no_attachments_from_before(
    node: NodeFacts, entry: FenceEntry, attachments: tuple[VolumeAttachmentFacts, ...] | None
) -> Reason:
    """A VolumeAttachment from before the fence still on the node means the attach-detach
    controller has not caught up with the fence: one that acts on that stale view after the
    taint is gone can force-detach a volume a pod on this node is using again (a Kubernetes
    defect fixed upstream). So the unfence waits until none is left; times are the API
    server's (its creation stamp against the record's fence time)."""
    if attachments is None:
        return _block(ATTACHMENTS, "the node's VolumeAttachments were not read")
    fenced = entry.fenced_at or entry.claimed_at
    old = sorted(
        a.name
        for a in attachments
        if a.node_name == node.name and a.attached and (a.created is None or a.created < fenced)
    )
    if old:
        return _block(
            ATTACHMENTS,
            f"{len(old)} VolumeAttachment(s) from before the fence ({instant(fenced)}) still "
            f"attached to it: {_listing(old)}; waiting for the attach-detach controller",
        )
    return _pass(ATTACHMENTS, "no VolumeAttachment from before the fence is attached to it")


def no_terminating_pods(node: NodeFacts, pods: tuple[PodFacts, ...]) -> Reason:
    """Releasing a node while its old pods are still being torn down could start their
    replacements on it beside them."""
    stuck = sorted(
        f"{p.namespace}/{p.name}" for p in pods if p.node_name == node.name and p.terminating
    )
    if stuck:
        return _block(
            TERMINATING_PODS, f"{len(stuck)} pod(s) still Terminating on it: {_listing(stuck)}"
        )
    return _pass(TERMINATING_PODS, "no pods are still Terminating on it")
