"""Every guard the engine (and the shell's dry-run power read) can name in a decision, in one table.

A guard's name is what ``-o json``, the log and the metrics show; everything else about it is
read from its row here, so that a new guard is one row, one function and one call: its words for
people (``explain``, ``status``), whether its refusal is a wait that ends on its own or a choice
someone made (a Normal Event) or something a person should look at (a Warning), whether a refusal
on it may stand on cached facts (``engine.cached``), whether a person's approval stands in for it
(``engine.escalation``), and what ``explain`` and the reporter treat specially. A guard name that
is not in the table is a programming error wherever it is read, never worded as another.

The constants below are the names the engine writes into its reasons; no module spells one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class UnknownGuardError(TypeError):
    """A guard name that is not in the table: a programming error."""


class EventType(StrEnum):
    """How a refusal by the guard is said on the Node: a refusal made only of Normal guards is a
    Normal Event; any Warning guard among the blocking ones makes it a Warning."""

    # A wait that ends on its own, or a choice someone made (a pause, an exclusion, a rule).
    NORMAL = "Normal"
    # What a person should see: budget, quorum, storm, no proof, another machine's BMC.
    WARNING = "Warning"


class Cache(StrEnum):
    """How a decision made on cached facts (``engine.cached``) may use the guard."""

    # Its refusal may stand on the cache: it reads only the node as the watch-fed index saw it,
    # the fence record, the cluster counts, the pause switch or Alertmanager's silences.
    REFUSES = "refuses"
    # The cache does not hold its facts (the Lease, a power reading): its reason is dropped from
    # a decision that stands, which is never refused because of it.
    UNREAD = "unread"
    # A refusal by it is decided again on live reads.
    LIVE = "live"


@dataclass(frozen=True)
class GuardKind:
    """One guard. ``words``: what holds a decision back, for people, completing "held back
    because ...". ``overruled``: a person's approval of an escalated failed power step stands in
    for its refusal. ``run_note``: it says how the decision was run (a dry run), not anything
    about the node; ``explain``, which forces the dry run, leaves it out. ``no_node``: its
    refusal means the node does not exist, so there is no Node to put an Event on (a counter
    instead) and nothing for ``explain`` to explain."""

    name: str
    words: str
    event: EventType = EventType.WARNING
    cache: Cache = Cache.LIVE
    overruled: bool = False
    run_note: bool = False
    no_node: bool = False
    # A wait only, which a read-only reading of Off from the node's machine ends for a rule
    # that lets it (``engine.power_waits``).
    ended_by_off: bool = False


KINDS: dict[str, GuardKind] = {}


def _row(kind: GuardKind) -> str:
    KINDS[kind.name] = kind
    return kind.name


_N = EventType.NORMAL

# How the decision was made.
DRY_RUN = _row(
    GuardKind(
        "dry-run",
        "the policy is a dry run: nothing is written",
        _N,
        run_note=True,
    )
)
NO_ALERT = _row(GuardKind("no-alert", "no alert arrived: the alert-free fallback judged it"))
CACHED_FACTS = _row(GuardKind("cached-facts", "it was judged on cached facts"))
CLOCK = _row(GuardKind("clock", "no reply of the API server dated the facts"))
VERDICT = _row(GuardKind("verdict", "the decision waits for a later pass"))

# Whether nodefence acts on this node at all.
PAUSED = _row(GuardKind("paused", "nodefence is paused", _N, Cache.REFUSES))
SILENCE = _row(GuardKind("silence", "an Alertmanager silence holds it", _N, Cache.REFUSES))
ALERT = _row(GuardKind("alert", "the alert is not one nodefence handles"))
NODE_LABEL = _row(GuardKind("node-label", "the alert names no node"))
NODE_FOUND = _row(
    GuardKind(
        "node-found",
        "the node does not exist in the cluster",
        # The node is not in the watch-fed index: a name that appeared within the index's delay
        # is not a node that has been dead for minutes.
        cache=Cache.REFUSES,
        no_node=True,
    )
)
NODE_IDENTITY = _row(
    GuardKind("node-identity", "the node was re-created under the same name (a new UID)")
)
EXCLUSION = _row(
    GuardKind("exclusion", "the node is excluded (nodefence.io/exclude)", _N, Cache.REFUSES)
)
RULE = _row(GuardKind("rule", "no rule of the policy matches it", _N, Cache.REFUSES))
OWNERSHIP = _row(GuardKind("ownership", "nodefence did not fence it"))
FENCE_IN_PROGRESS = _row(
    GuardKind("fence-in-progress", "a fence of it is in progress", cache=Cache.REFUSES)
)
FENCE_RECORD = _row(GuardKind("fence-record", "the fence record lost this fence's entry"))
ALERT_RESOLVED = _row(GuardKind("alert-resolved", "its alert resolved"))

# Who acts: a replica never powers off the machine it runs on.
OWN_NODE = _row(
    GuardKind(
        "own-node", "this replica runs on it, so another replica fences it", _N, Cache.REFUSES
    )
)

# S1, S2, S11: liveness, on the API server's clock.
READY = _row(GuardKind("ready", "the node is Ready", _N, Cache.REFUSES))
NOT_READY_DURATION = _row(
    GuardKind(
        "not-ready-duration",
        "it has not been NotReady long enough yet",
        _N,
        Cache.REFUSES,
        ended_by_off=True,
    )
)
ALERT_WAIT = _row(
    GuardKind(
        "alert-wait",
        "no alert has come for it yet, and the fallback waits for one",
        _N,
        Cache.REFUSES,
        ended_by_off=True,
    )
)
LEASE = _row(
    GuardKind(
        "lease",
        "its kubelet may still be running (its Lease was renewed recently)",
        _N,
        Cache.UNREAD,
    )
)
FOREIGN_TAINT = _row(
    GuardKind(
        "foreign-taint",
        "an out-of-service taint nodefence did not apply is already on it",
        cache=Cache.REFUSES,
    )
)

# S3: cluster limits.
STORM = _row(
    GuardKind(
        "storm",
        "too many nodes are NotReady at once, which points at the network",
        cache=Cache.REFUSES,
    )
)
STORM_COOLDOWN = _row(
    GuardKind("storm-cooldown", "a storm of NotReady nodes ended only recently", _N, Cache.REFUSES)
)
BUDGET = _row(
    GuardKind(
        "fence-budget",
        "the fence budget is spent: as many nodes are fenced as the policy allows",
        cache=Cache.REFUSES,
    )
)
READY_FRACTION = _row(
    GuardKind("ready-fraction", "fencing it would leave too few nodes Ready", cache=Cache.REFUSES)
)
CONTROL_PLANE = _row(
    GuardKind("control-plane-quorum", "fencing it would leave the control plane without a majority")
)
FLAP = _row(
    GuardKind(
        "flap",
        "nodefence let go of it only recently, and it may be flapping",
        _N,
        Cache.REFUSES,
    )
)

# S10: proof that the machine is off, and a person in its place.
POWER_OFF = _row(
    GuardKind(
        "power-off",
        "there is no proof that its machine is off",
        cache=Cache.UNREAD,
        overruled=True,
    )
)
DRY_RUN_POWER = _row(
    GuardKind(
        "dry-run-power", "there is no proof that its machine is off (its BMC or agent was asked)"
    )
)
MACHINE_IDENTITY = _row(
    GuardKind(
        "machine-identity",
        "its BMC or fence agent is not shown to control this node's machine",
        cache=Cache.UNREAD,
        overruled=True,
    )
)
APPROVAL = _row(
    GuardKind("approval", "a person's approval in Slack is needed", cache=Cache.REFUSES)
)
ESCALATION = _row(GuardKind("escalation", "the power step failed and a person is asked"))

# After the fence: pods, volumes, the machine.
PURGE = _row(GuardKind("purge", "it shows signs of life, so its pods are not purged"))
VOLUMES = _row(GuardKind("volumes", "VolumeAttachments of it are not released"))
REBOOT = _row(GuardKind("reboot", "it did not come back after its reboot"))
# The reconcile pass's measurement of an incident's recovery (``engine.recovery``).
RECOVERY = _row(GuardKind("recovery", "the workloads it held have not recovered elsewhere yet"))
PROOF_CONTRADICTED = _row(
    GuardKind(
        "proof-contradicted",
        "its machine was back with its fence-time boot ID: the proof was false",
    )
)

# S5: the unfence.
HEALTHY_DELAY = _row(GuardKind("healthy-delay", "it has not been Ready long enough yet", _N))
LEASE_FRESH = _row(
    GuardKind("lease-fresh", "its kubelet Lease has not been renewed since it came back", _N)
)
BOOT_ID = _row(GuardKind("boot-id", "it has not come back with a new boot ID", _N))
TERMINATING_PODS = _row(GuardKind("terminating-pods", "pods are still Terminating on it", _N))
ATTACHMENTS = _row(GuardKind("volume-attachments", "volumes are still attached to it", _N))

# A person's answer in Slack (``engine.answer``).
ANSWER_NOT_FENCED = _row(GuardKind("answer-not-fenced", "it is already fenced"))
ANSWER_NODE_EXISTS = _row(GuardKind("answer-node-exists", "the node no longer exists"))
ANSWER_SAME_NODE = _row(
    GuardKind("answer-same-node", "the node is not the node object the question was about")
)
ANSWER_STILL_NOT_READY = _row(GuardKind("answer-still-not-ready", "the node is Ready again"))
ANSWER_SAME_OUTAGE = _row(
    GuardKind("answer-same-outage", "the node is not in the outage the question was about")
)
ANSWER_NOT_REJECTED = _row(
    GuardKind("answer-not-rejected", "a rejection of fencing it holds for this outage")
)
ANSWER_NOT_APPROVED = _row(
    GuardKind("answer-not-approved", "an approval of fencing it is already being acted on")
)
ANSWER_FENCED_WITH_IT = _row(
    GuardKind("answer-fenced-with-it", "it was not fenced on this approval")
)

# An operator's release (``engine.release``).
RELEASE_HELD = _row(GuardKind("release-held", "nodefence's fence record holds no fence of it"))
RELEASE_OWN_TAINT = _row(
    GuardKind("release-own-taint", "the out-of-service taint on it is not nodefence's")
)
RELEASE_NOT_BEING_WRITTEN = _row(
    GuardKind("release-not-being-written", "a fence of it is being written")
)
RELEASE_TAINT_UNCHANGED = _row(
    GuardKind("release-taint-unchanged", "its out-of-service taint was changed")
)
RELEASE_CONFIRMED = _row(
    GuardKind("release-confirmed", "it is NotReady and the operator did not confirm the release")
)


def kind(name: str) -> GuardKind:
    """The row of ``name``; an unknown name is an error, never worded or judged as another."""
    found = KINDS.get(name)
    if found is None:
        raise UnknownGuardError(f"nodefence has no guard {name!r}")
    return found


def words(guard: str) -> str:
    """What holds a decision back, in an operator's words, without nodefence's internal guard
    names (which only ``-o json`` shows)."""
    return kind(guard).words


def warns(guard: str) -> bool:
    """Whether a refusal by ``guard`` is said as a Warning Event."""
    return kind(guard).event is EventType.WARNING


def cache(guard: str) -> Cache:
    return kind(guard).cache


def ended_by_off(guard: str) -> bool:
    """Whether the guard is a wait a reading of Off from the node's machine ends."""
    return kind(guard).ended_by_off


def overruled(guard: str) -> bool:
    """Whether a person's approval of an escalated failed power step stands in for it."""
    return kind(guard).overruled
