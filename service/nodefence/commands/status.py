"""``nodefence status``: what nodefence holds now, read from the fence record.

The record is the authority, so this is what an operator asks at 3 a.m.: which nodes nodefence
has fenced (since when on the API server's clock, by which rule, on what proof, with whose
approval), which fences are half-written (claimed, taint not yet on), which approval
requests are waiting for a person (in the record too: never what a node's annotations say), and
what the machines' BMCs or fence agents last answered to nodefence's power steps.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nodefence.alertmanager.client import AlertmanagerUnavailableError, held_nodes
from nodefence.engine import mirror
from nodefence.engine.approval_request import ApprovalRequest
from nodefence.engine.model import OUT_OF_SERVICE_KEY
from nodefence.engine.printable import printable_lines
from nodefence.engine.record import FenceRecord, Phase, RecordedReading
from nodefence.engine.wording import duration, instant, parse_instant
from nodefence.kube.client import Deadline, Json, KubeError
from nodefence.policy import Policy, Rule
from nodefence.shell.fencer import Fencer
from nodefence.shell.volume_gauge import attached_volumes


def _fence(entry: Any) -> dict[str, Any]:
    since = entry.fenced_at or entry.claimed_at
    return {
        "node": entry.node,
        "nodeUID": entry.uid,
        "phase": entry.phase.value,
        "since": instant(since),
        "claimedAt": instant(entry.claimed_at),
        "claimedBy": entry.claimed_by,
        "rule": entry.rule,
        "alert": entry.alertname,
        "fingerprint": entry.fingerprint,
        "taintEffect": entry.effect,
        "bootIDAtFence": entry.boot_id,
        "proof": entry.proof or "none recorded",
        "approval": entry.approval or "none",
        "readySeenAt": instant(entry.ready_seen_at) if entry.ready_seen_at else None,
        # Back with its fence-time boot ID: the proof was false; held for a person.
        "proofContradictedAt": (
            instant(entry.proof_contradicted_at) if entry.proof_contradicted_at else None
        ),
        "recovery": _recovery(entry),
    }


def _recovery(entry: Any) -> dict[str, Any] | None:
    """The incident's recovery (``engine.recovery``), as the fence record holds it: when the
    node went silent, how many pods it held are awaited elsewhere, and once measured, since
    when they run there and the seconds ``nodefence_recovery_seconds`` counted; None when the
    entry remembers nothing to measure."""
    silent = entry.silent_since
    if silent is None or not (entry.held.count or entry.held.left_out):
        return None
    out: dict[str, Any] = {
        "silentSince": instant(silent),
        "pods": entry.held.count,
        "podsNotRemembered": entry.held.left_out,
        "kinds": list(entry.held.kinds()),
        "runningElsewhereSince": None,
        "seconds": None,
        "fencedAfterSeconds": (
            round((entry.fenced_at - silent).total_seconds()) if entry.fenced_at else None
        ),
    }
    if entry.recovered_at is not None:
        out["runningElsewhereSince"] = instant(entry.recovered_at)
        out["seconds"] = round((entry.recovered_at - silent).total_seconds())
    return out


def report(record: FenceRecord, nodes: list[Json]) -> dict[str, Any]:
    fenced = [_fence(e) for e in record.entries if e.phase is Phase.FENCED]
    half = [_fence(e) for e in record.entries if e.phase is Phase.CLAIMED]
    uids = {n["metadata"]["name"]: n["metadata"].get("uid") for n in nodes}
    pending = [
        _pending(a)
        for a in record.approvals
        # Asked about this very node object and not answered with a no; an expired question
        # still waits for a person until the next alert asks again.
        if not a.rejection
        and a.requested_at is not None
        and uids.get(a.node) == a.incident.node_uid
    ]
    # S3: taints the record does not hold still spend the budget; nodefence's own among them
    # (its mirror on the node) show a record that lost entries.
    held = {e.node for e in record.entries}
    tainted = [n for n in nodes if _out_of_service(n) and n["metadata"]["name"] not in held]
    return {
        "record": {"resourceVersion": record.resource_version or None},
        "withoutRecord": sorted(n["metadata"]["name"] for n in tainted if _mirrored(n)),
        "taintedOutsideRecord": sorted(n["metadata"]["name"] for n in tainted),
        "fenced": sorted(fenced, key=lambda f: f["node"]),
        "halfWritten": sorted(half, key=lambda f: f["node"]),
        "unreadableEntries": list(record.unreadable),
        "pendingApprovals": sorted(pending, key=lambda p: p["node"]),
        "unreadableApprovalRequests": list(record.unreadable_approvals),
        "recentlyReleased": [
            {"node": r.node, "nodeUID": r.uid, "at": instant(r.at), "why": r.why}
            for r in sorted(record.released, key=lambda r: r.node)
        ],
        "powerReadings": [
            _reading(r) for r in sorted(record.readings, key=lambda r: (r.node, r.at))
        ],
    }


def _reading(reading: RecordedReading) -> dict[str, Any]:
    identity = reading.identity
    return {
        "node": reading.node,
        "nodeUID": reading.uid,
        "at": instant(reading.at),
        "operation": reading.operation,
        "state": reading.state,
        "source": reading.source,
        "detail": reading.detail,
        "actionSent": reading.action_sent,
        "identity": identity.value if identity is not None else None,
    }


def _pending(request: ApprovalRequest) -> dict[str, Any]:
    return {
        "node": request.node,
        "nodeUID": request.incident.node_uid,
        "fingerprint": request.incident.fingerprint,
        "requestedAt": instant(request.requested_at) if request.requested_at else None,
        "expiresAt": instant(request.expires_at) if request.expires_at else None,
        "message": f"{request.channel}/{request.ts}" if request.posted else None,
        # The failed power step an escalation's question asks about (None: a rule's approval).
        "about": request.subject or None,
    }


def _out_of_service(node: Json) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == OUT_OF_SERVICE_KEY for t in taints)


def _mirrored(node: Json) -> bool:
    notes = (node.get("metadata") or {}).get("annotations") or {}
    return notes.get(mirror.FENCED_BY) == mirror.FENCED_BY_VALUE


async def gather(fencer: Fencer, deadline: Deadline) -> dict[str, Any]:
    """``fencer`` runs a dry-run policy: the NotReady nodes are judged as ``explain`` does."""
    from nodefence.commands.held_back import operator_view
    from nodefence.commands.probe_status import probe_view

    record = await fencer.read_record(deadline)
    nodes = await fencer.kube.list_nodes(deadline)
    status = report(record, nodes)
    await _volumes_of_fenced(status, fencer, deadline)
    probes = await probe_view(fencer.kube, fencer.reader.namespace, fencer.loop.inventory, deadline)
    _earliest_unfences(status, fencer.policy)
    return {
        **status,
        **await operator_view(fencer, record, nodes, deadline),
        "fencingProbes": probes,
        "alertmanager": {
            **await _alertmanager(fencer),
            **await _silences(fencer, deadline),
        },
    }


async def _silences(fencer: Fencer, deadline: Deadline) -> dict[str, Any]:
    """The Alertmanager silences that hold nodes of this cluster where no alert is held, and
    whether they were read now or are the ones last read (Alertmanager cannot be asked)."""
    known = await fencer.silences_held(deadline)
    return {
        "silences": [
            {
                "id": s.id,
                "matchers": [str(m) for m in s.matchers],
                "createdBy": s.created_by,
                "comment": s.comment,
                "startsAt": instant(s.starts_at),
                "endsAt": instant(s.ends_at),
            }
            for s in known.silences
        ],
        "silencesReadAt": instant(known.read_at) if known.read_at is not None else None,
        "silencesLive": known.live,
    }


async def _alertmanager(fencer: Fencer) -> dict[str, Any]:
    """Whether Alertmanager's API answers, and which nodes it holds alerts for: the fallback
    (``cluster.fallback_after_seconds``) leaves those alone, and without an answer it cannot
    know of a silence."""
    policy = fencer.policy
    view: dict[str, Any] = {
        "url": None,
        "reachable": None,
        "error": "",
        "nodesHeld": [],
        "fallbackAfterSeconds": policy.cluster.fallback_after_seconds,
    }
    config = fencer.alertmanager
    if config is None:
        return view
    view["url"] = config.alerts_url
    try:
        held = await held_nodes(config, policy.alerts.names, policy.alerts.node_labels)
    except AlertmanagerUnavailableError as exc:
        view.update(reachable=False, error=str(exc))
        return view
    view.update(reachable=True, nodesHeld=sorted(held))
    return view


def _alertmanager_line(view: dict[str, Any]) -> str:
    after = view["fallbackAfterSeconds"]
    fallback = (
        f"NotReady nodes no alert brings are judged after {duration(after)}"
        if after
        else "the fallback is off (cluster.fallback_after_seconds 0)"
    )
    if view["url"] is None:
        return (
            f"Alertmanager: not configured (NODEFENCE_ALERTMANAGER_URL); {fallback}, without "
            "knowing of silences"
        )
    if not view["reachable"]:
        return (
            f"Alertmanager: UNREACHABLE: {view['error']}; {fallback}, without knowing of silences"
        )
    held = ", ".join(view["nodesHeld"]) or "none"
    return f"Alertmanager: reachable at {view['url']}; node alerts held for: {held}; {fallback}"


def _silence_lines(view: dict[str, Any]) -> list[str]:
    silences = view.get("silences") or []
    if not silences and view.get("silencesReadAt") is None:
        return []
    source = (
        "as read now"
        if view.get("silencesLive")
        else f"as last read at {view['silencesReadAt']}, held until they end"
    )
    lines = [f"Silences that hold nodes without an alert ({source}): {len(silences) or 'none'}"]
    for s in silences:
        lines.append(
            f"  {s['id']}  {{{', '.join(s['matchers'])}}}  until {s['endsAt']}  by "
            f"{s['createdBy'] or '?'}: {s['comment']}"
        )
    return lines


def _earliest_unfences(status: dict[str, Any], policy: Policy) -> None:
    """Each fenced node seen Ready again: the earliest unfence, when its rule's healthy delay
    has run from that moment (the other checks, pods and volumes, may hold it longer)."""
    for fenced in status["fenced"]:
        seen = parse_instant(fenced.get("readySeenAt"))
        rule = policy.rule_named(fenced.get("rule")) or Rule()
        fenced["earliestUnfence"] = (
            instant(seen + timedelta(seconds=rule.healthy_delay_seconds)) if seen else None
        )


async def _volumes_of_fenced(status: dict[str, Any], fencer: Fencer, deadline: Deadline) -> None:
    """Each fenced node's VolumeAttachments still attached (``volumesAttached``): a fence that
    left them is no plain success. None when they could not be listed (say, your credentials
    may not list VolumeAttachments)."""
    fenced = status["fenced"]
    try:
        attached = await attached_volumes(fencer.kube, {f["node"] for f in fenced}, deadline)
    except KubeError:
        for f in fenced:
            f["volumesAttached"] = None
        return
    for f in fenced:
        f["volumesAttached"] = [
            {"name": va.name, "persistentVolume": va.persistent_volume}
            for va in sorted(attached.get(f["node"], []), key=lambda va: va.name)
        ]


def _recovery_lines(recovery: dict[str, Any] | None) -> list[str]:
    if recovery is None:
        return []
    kinds = " and ".join(recovery["kinds"]) or "no"
    fenced = (
        f"; fenced {recovery['fencedAfterSeconds']} s after"
        if recovery["fencedAfterSeconds"] is not None
        else ""
    )
    left = (
        f" ({recovery['podsNotRemembered']} more not remembered)"
        if recovery["podsNotRemembered"]
        else ""
    )
    if recovery["seconds"] is None:
        return [
            f"      recovery: waiting for {recovery['pods']} {kinds} pod(s){left} to run "
            f"elsewhere; silent since {recovery['silentSince']}{fenced}"
        ]
    return [
        f"      recovery: {kinds} pods running elsewhere {recovery['seconds']} s after the node "
        f"went silent (at {recovery['silentSince']}){fenced}; {recovery['pods']} pod(s){left}"
    ]


def as_text(status: dict[str, Any]) -> str:
    """The report for a person. Most of it was written by others (proofs and readings quote
    BMCs, a pause reason is whoever wrote the ConfigMap's): each line is shown escaped, never
    obeyed, and a newline inside a value does not start a line of its own."""
    from nodefence.commands.held_back import held_back_lines, pause_line

    lines: list[str] = [pause_line(status)]
    if "alertmanager" in status:
        lines.append(_alertmanager_line(status["alertmanager"]))
        lines.extend(_silence_lines(status["alertmanager"]))
    fenced = status["fenced"]
    lines.append(f"Fenced by nodefence: {len(fenced) or 'none'}")
    for f in fenced:
        lines.append(
            f"  {f['node']}  since {f['since']}  rule {f['rule']!r}  effect {f['taintEffect']}"
        )
        unproven = f["proof"].startswith(("no proof", "no power-off proof"))
        proof = f["proof"] if unproven else f"proof: {f['proof']}"
        lines.append(f"      {proof}; approval: {f['approval']}")
        if f["readySeenAt"]:
            lines.append(
                f"      seen Ready again since {f['readySeenAt']}; earliest unfence "
                f"{f['earliestUnfence']}"
            )
        lines.extend(_recovery_lines(f.get("recovery")))
        if f.get("volumesAttached"):
            names = ", ".join(
                f"{va['name']} ({va['persistentVolume']})" for va in f["volumesAttached"]
            )
            lines.append(
                f"      VOLUMES NOT RELEASED: still attached: {names}; pods that use them cannot "
                "start on another node until they go (kubectl delete volumeattachment NAME, "
                "once the machine is known to be off)"
            )
        if f.get("proofContradictedAt"):
            lines.append(
                f"      HELD: back at {f['proofContradictedAt']} with its fence-time boot ID, so "
                f"its power-off proof was false; `nodefence release {f['node']} --reason ...` "
                "once checked"
            )
    for name in status["withoutRecord"]:
        lines.append(
            f"  {name}  NO RECORD ENTRY: nodefence's taint and mirror are on the node but the "
            "fence record lost its entry; the reconcile pass writes it back where the API "
            "server shows nodefence wrote the taint"
        )
    others = [n for n in status["taintedOutsideRecord"] if n not in status["withoutRecord"]]
    if others:
        lines.append(
            "Out-of-service taints nodefence did not apply (they count against the budget): "
            + ", ".join(others)
        )
    half = status["halfWritten"]
    lines.append(f"Half-written fences (claimed, taint not confirmed): {len(half) or 'none'}")
    for f in half:
        lines.append(f"  {f['node']}  claimed at {f['claimedAt']} by {f['claimedBy'] or '?'}")
    if status["unreadableEntries"]:
        lines.append(
            "Unreadable record entries (they still hold budget): "
            + ", ".join(status["unreadableEntries"])
        )
    pending = status["pendingApprovals"]
    lines.append(f"Pending approvals: {len(pending) or 'none'}")
    for p in pending:
        where = f" (Slack message {p['message']})" if p.get("message") else " (being posted)"
        lines.append(f"  {p['node']}  asked at {p['requestedAt']}, expires {p['expiresAt']}{where}")
    readings = status.get("powerReadings") or []
    lines.append(f"Power-step readings kept in the record: {len(readings) or 'none'}")
    for r in readings:
        said = f": {r['detail']}" if r["detail"] else ""
        machine = f"; machine {r['identity']}" if r["identity"] else ""
        lines.append(
            f"  {r['node']}  {r['at']}  {r['operation']}: {r['source']} answered "
            f"{r['state']}{said}{machine}"
        )
    if status.get("unreadableApprovalRequests"):
        lines.append(
            "Unreadable approval requests (counted as none: the next alert asks again): "
            + ", ".join(status["unreadableApprovalRequests"])
        )
    released = status["recentlyReleased"]
    if released:
        lines.append("Recently released:")
        for r in released:
            lines.append(f"  {r['node']}  at {r['at']}: {r['why']}")
    lines.extend(held_back_lines(status))
    from nodefence.commands.probe_status import probe_lines

    lines.extend(probe_lines(status))
    return printable_lines(lines)
