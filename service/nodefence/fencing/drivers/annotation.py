"""Driver ``annotation``: the proof external fencing wrote, read before deciding.

External fencing writes ``<annotation>: off`` on the ConfigMap ``nodefence-power.<node>`` in
nodefence's namespace once the machine is off: a place a node's own credentials cannot write
(S12), so each proof carries its own server-stamped write time (``kube.convert.power_proof``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodefence.engine.evidence import PowerEvidence
from nodefence.kube.client import KubeError
from nodefence.kube.convert import power_proof

if TYPE_CHECKING:
    from nodefence.fencing.model import ProofPlace
    from nodefence.kube.client import Deadline
    from nodefence.policy import Fencing

POWER_PROOF_PREFIX = "nodefence-power."
# A ConfigMap's name is a DNS subdomain.
MAX_NAME = 253


async def read_proof(
    place: ProofPlace, fencing: Fencing, node: str, deadline: Deadline
) -> PowerEvidence:
    """The proof external fencing wrote for this node. An absent ConfigMap, or one whose name
    cannot exist, is no proof."""
    name = POWER_PROOF_PREFIX + node
    source = f"ConfigMap {place.namespace}/{name}"
    if len(name) > MAX_NAME:
        return PowerEvidence("unknown", source, "the node's name is too long for a ConfigMap")
    try:
        configmap = await place.kube.get_configmap(place.namespace, name, deadline)
    except KubeError as exc:
        if exc.status == 403:
            # An install whose Role predates the written proof: a clear refusal on every
            # alert, not an error Alertmanager would retry in vain.
            return PowerEvidence(
                "unknown",
                source,
                f"nodefence may not read it (403): its Role needs get on configmaps in "
                f"namespace {place.namespace}",
            )
        if exc.status != 404:
            raise
        return PowerEvidence(
            "unknown",
            source,
            "no such ConfigMap (external fencing writes it once the machine is off)",
        )
    return power_proof(configmap, fencing.annotation, source)
