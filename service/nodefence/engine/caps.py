"""How much of each text from outside nodefence the fence record keeps.

The fence record (``engine.record``, ConfigMap ``nodefence-fences``) is one object every fence
of the cluster writes; at 1 MiB the API server refuses every write of it, and with it every
fence. Much of what it holds was said by someone else: a BMC's or agent's reported identity and
error, a node's boot ID, an alert's fingerprint, a person's name in an approval, a release's
reason. One BMC reporting a 300 kB "UUID" must not fill it. So each such field has a cap, in
bytes of its stored form (the JSON the record is written as, where a control character takes 6
bytes and a character beyond U+FFFF 12), applied where the text becomes part of a record value
(the record's dataclasses and the live values they are compared with), so what is compared, what
is stored and what is read back are the same text. A cut value ends in a marker saying how much
was cut, which no well-formed UUID, plug or boot ID ends in: a cut identity never matches a
machine.

``FIELD_CAPS`` is the table: stored key (``<value kind>.<field>``) to bytes. The fields not in it
are bounded where they come from: node names (253) and UIDs by the API server's validation,
rule and alert names by the policy, claim tokens by the replica, times (RFC 3339) and states
(``on``, ``off``, ``unknown``) by nodefence itself. How many values the record holds is bounded
in ``engine.record`` (``MAX_READINGS`` a node for at most ``MAX_READING_NODES`` nodes,
``MAX_APPROVALS``, ``MAX_RELEASES``), the pods a fence entry remembers in ``engine.held_pods``
(``MAX_HELD_PODS`` and ``MAX_HELD_BYTES``: whole pods are left out, never a name cut) and by
the policy's fence budget (``cluster.max_fenced_nodes``, at most ``policy.MAX_FENCED_NODES``).
"""

from __future__ import annotations

import json
from types import MappingProxyType

FIELD_CAPS = MappingProxyType(
    {
        # fence.<node>: a proof quotes the BMC (its state, the identity it reported).
        "fence.proof": 768,
        # Who approved, as Slack named them, and when.
        "fence.approval": 256,
        # Written by the node's own kubelet (a UUID, 36 characters).
        "fence.bootID": 64,
        # The alert's (Alertmanager's are 16 hex digits; a webhook sender may send anything).
        "fence.fingerprint": 64,
        # released.<node>: the operator's --reason, or nodefence's own words.
        "released.why": 256,
        # approval.<node>
        "approval.fingerprint": 64,
        # The failed power step a person is asked to overrule, quoting the BMC's error.
        "approval.subject": 640,
        # "rejected by <Slack user> at <time>".
        "approval.rejection": 256,
        # "approved by <Slack user> at <time>": the approval being acted on.
        "approval.approval": 256,
        "approval.channel": 32,
        "approval.ts": 32,
        # reading.<node>: a driver's answer to one power step.
        "reading.source": 160,
        "reading.detail": 256,
        # reading.<node>.identity: which machine the BMC or agent said it controls.
        "identity.value": 128,
        "identity.source": 160,
        "identity.agent": 64,
        "identity.detail": 128,
        "identity.scope": 64,
        "identity.alias": 64,
    }
)
# Other names a fence agent's list gives one machine, kept per identity.
MAX_ALIASES = 2


def stored_size(text: str) -> int:
    """The bytes ``text`` takes as a JSON string (without its quotes) in the record."""
    return len(json.dumps(text)) - 2


def _cost(char: str) -> int:
    return stored_size(char)


def _marker(cut: int) -> str:
    return f"...[{cut} more characters cut]"


def capped(text: str, cap: int) -> str:
    """``text`` if it fits in ``cap`` bytes of stored form, else its beginning and a marker
    saying how many characters were cut, together at most ``cap`` bytes. Applying it twice
    changes nothing."""
    # Every character takes a byte at least: a longer text is cut without measuring it whole.
    if len(text) * 12 <= cap or (len(text) <= cap and stored_size(text) <= cap):
        return text
    budget = cap - stored_size(_marker(len(text)))
    kept = 0
    spent = 0
    for char in text:
        cost = _cost(char)
        if spent + cost > budget:
            break
        spent += cost
        kept += 1
    return text[:kept] + _marker(len(text) - kept)


def field(key: str, text: str) -> str:
    """``text`` capped as the record's ``key`` (a key of ``FIELD_CAPS``) keeps it."""
    return capped(text, FIELD_CAPS[key])
