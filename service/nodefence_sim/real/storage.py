"""The real CSI path of the real backend, so that a volume meets what a real cluster does to it
when its node dies: the attach-detach controller, the real external-provisioner and
external-attacher, and on a real node the real kubelet staging and publishing it.

The driver is the project's own (``nodefence-csi``, built by ``make csi`` with the two sidecars
from their Go modules): a disk that is attached to one node at a time, as a cloud or SAN disk
is (its controller refuses to attach it elsewhere while it is attached, and its node plugin
refuses to stage it on a node it is not attached to), whose data lives in a directory that every
node of this machine sees, as network storage does, so a pod moved to another node finds its
data. The controller side (driver, provisioner, attacher) runs beside the control plane; the
node plugin runs inside each real machine, registered with its kubelet through the kubelet's
plugin-registration socket, and dies with the machine. kwok nodes get their volumes attached
by the same attacher; nothing stages them.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from nodefence_sim.errors import ApiError
from nodefence_sim.real.components import CSI_SIDECARS, ControlPlane, ControlPlaneError
from nodefence_sim.real.rest import Rest

CSI_ENV = "NODEFENCE_CSI"
DRIVER = "hostdir.csi.nodefence.io"
# The StorageClass the driver provisions for; StatefulSets name it in their claim templates.
STORAGE_CLASS = "hostdir"
DRIVER_BINARY = "nodefence-csi"
BINARIES = (DRIVER_BINARY, "csi-provisioner", "csi-attacher")
START_TIMEOUT = 60.0
# The kubelet's plugin watcher takes any socket in <root-dir>/plugins_registry; the name is
# short because a Unix socket's path is at most 107 bytes.
REGISTRATION_SOCKET = "hostdir-reg.sock"


def find_csi() -> Path | None:
    """The directory of the three binaries: ``$NODEFENCE_CSI``, else where ``nodefence-csi``
    is on PATH; None when neither is there (the backend then runs without a CSI driver)."""
    configured = os.environ.get(CSI_ENV)
    if configured:
        directory = Path(configured)
        missing = [b for b in BINARIES if not os.access(directory / b, os.X_OK)]
        if missing:
            raise ControlPlaneError(
                f"{CSI_ENV}={configured} lacks {', '.join(missing)}; `make csi` builds them "
                "(it prints their directory last)"
            )
        return directory
    found = shutil.which(DRIVER_BINARY)
    if found is None:
        return None
    directory = Path(found).parent
    return directory if all(os.access(directory / b, os.X_OK) for b in BINARIES) else None


@dataclass(frozen=True)
class Storage:
    """The running CSI machinery: where its binaries and its volumes' data are."""

    bin_dir: Path
    state_dir: Path

    def node_plugin(self, node: str, machine_dir: Path, kubelet_root: Path) -> list[str]:
        """The node plugin's command line for the real node ``node``, run inside its machine."""
        return [
            str(self.bin_dir / DRIVER_BINARY),
            "node",
            f"--endpoint=unix://{machine_dir / 'csi.sock'}",
            f"--state-dir={self.state_dir}",
            f"--node-id={node}",
            f"--registration-socket={kubelet_root / 'plugins_registry' / REGISTRATION_SOCKET}",
        ]


def start_storage(plane: ControlPlane, rest: Rest, bin_dir: Path) -> Storage:
    """Start the driver's controller and the two sidecars beside the control plane, and create
    the CSIDriver (attach required) and the StorageClass."""
    state = plane.workdir / "csi"
    state.mkdir(exist_ok=True)
    socket = state / "controller.sock"
    plane.run_component(
        "csi-controller",
        [
            str(bin_dir / DRIVER_BINARY),
            "controller",
            f"--endpoint=unix://{socket}",
            f"--state-dir={state}",
        ],
    )
    deadline = time.monotonic() + START_TIMEOUT
    while not socket.exists():
        plane.check_alive()
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"the CSI controller's socket not within {START_TIMEOUT:.0f}s")
        time.sleep(0.1)
    kubeconfig = plane.kubeconfig_for(CSI_SIDECARS)
    common = [
        f"--csi-address={socket}",
        f"--kubeconfig={kubeconfig}",
        "--leader-election=false",
        # The sidecars retry a refused call with a backoff that grows to 5 minutes by default:
        # an attach refused while the dead node still held the disk would then wait minutes
        # after the force-detach freed it. A recovery measured in seconds retries every 5 s.
        "--retry-interval-max=5s",
    ]
    plane.run_component("csi-provisioner", [str(bin_dir / "csi-provisioner"), *common])
    plane.run_component("csi-attacher", [str(bin_dir / "csi-attacher"), *common])
    _create(
        rest,
        "/apis/storage.k8s.io/v1/csidrivers",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": DRIVER},
            "spec": {
                "attachRequired": True,
                "podInfoOnMount": False,
                "volumeLifecycleModes": ["Persistent"],
            },
        },
    )
    _create(
        rest,
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS},
            "provisioner": DRIVER,
            "reclaimPolicy": "Delete",
            # Provisioned once the pod is placed, as for a zonal disk.
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    return Storage(bin_dir, state)


def register_kwok_nodes(rest: Rest, nodes: list[str]) -> None:
    """Write each kwok node's CSINode as a kubelet writes it when the driver's node plugin
    registers: the attacher reads the driver's node ID there, and refuses a node without it."""
    for node in nodes:
        _create(
            rest,
            "/apis/storage.k8s.io/v1/csinodes",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": node},
                "spec": {"drivers": [{"name": DRIVER, "nodeID": node}]},
            },
        )


def _create(rest: Rest, collection: str, body: dict[str, object]) -> None:
    try:
        rest.post(collection, body)
    except ApiError as exc:
        if exc.code != 409:
            raise
