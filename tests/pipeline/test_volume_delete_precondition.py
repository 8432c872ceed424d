"""S9 for VolumeAttachments: a delete names the attachment it read by UID. Its name is a hash of
volume, attacher and node name, so one re-created under the same name (a node re-created under
the same name gets the same one) is another object, and is never the one deleted."""

from __future__ import annotations

from typing import Any

import pytest
from tests.seeded_cluster import start_receiver

from nodefence.actions.executor import Executor, Outcome
from nodefence.kube.client import Deadline
from nodefence.kube.convert import volume_attachment_facts
from nodefence_sim.resources import VOLUME_ATTACHMENTS
from nodefence_sim.store import DeleteOptions
from nodefence_sim.testing import SimulatorHandle

pytestmark = pytest.mark.invariant("S9")


def attachments(cluster: SimulatorHandle) -> dict[str, dict[str, Any]]:
    return {va["metadata"]["name"]: va for va in cluster.sim.store.items(VOLUME_ATTACHMENTS)}


def recreate(cluster: SimulatorHandle, name: str) -> str:
    """Delete the attachment and create it again under its name: the same spec, a new UID."""
    old = attachments(cluster)[name]
    cluster.sim.store.delete(VOLUME_ATTACHMENTS, None, name, DeleteOptions())
    assert name not in attachments(cluster), "deleted at once (no finalizer holds it)"
    again = {
        "apiVersion": old["apiVersion"],
        "kind": old["kind"],
        "metadata": {"name": name},
        "spec": old["spec"],
    }
    return str(cluster.sim.store.create(VOLUME_ATTACHMENTS, None, again)["metadata"]["uid"])


async def test_an_attachment_re_created_under_its_name_is_not_deleted(
    cluster: SimulatorHandle,
) -> None:
    async with start_receiver(cluster) as receiver:
        kube = receiver.pipeline.kube
        executor = Executor(kube)
        listed = [volume_attachment_facts(a) for a in await kube.list_volume_attachments()]
        assert listed, "the seed cluster has attachments"
        read = listed[0]
        assert read.uid, "the read attachment's UID is kept"
        new_uid = recreate(cluster, read.name)
        assert new_uid != read.uid

        replaced = await executor.release_volume(read.name, read.uid, Deadline(10))
        assert replaced.outcome is Outcome.SKIPPED, replaced
        assert "replaced" in replaced.detail
        assert attachments(cluster)[read.name]["metadata"]["uid"] == new_uid

        current = await executor.release_volume(read.name, new_uid, Deadline(10))
        assert current.outcome is Outcome.DONE, current
        assert read.name not in attachments(cluster)
