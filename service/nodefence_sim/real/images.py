"""Container images made on this machine, with no registry: each is one file packed as a
one-layer docker archive (``manifest.json``, the image config and the layer's tar), the format
``docker save`` writes and both ``ctr images import`` and ``docker load`` read.

- ``pause``: the sandbox image, the static ``pause`` binary built beside the control plane;
- ``busybox``: Debian's ``busybox-static`` as ``/bin/busybox`` with its applets linked, for the
  workloads the tests run on real nodes.

Their names carry no registry host: ``nodefence-sim/...``, present on every node before a pod
needs them, so no kubelet ever pulls.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

PAUSE = "nodefence-sim/pause:1"
BUSYBOX = "nodefence-sim/busybox:1"
BUSYBOX_BINARY = Path("/bin/busybox")


class ImageError(RuntimeError):
    """An image's file is missing; the message says where it comes from."""


@dataclass(frozen=True)
class LocalImage:
    reference: str
    archive: Path


def _layer(files: dict[str, tuple[bytes, int]], links: dict[str, str]) -> bytes:
    """A layer tar of ``files`` (path -> content, mode) and symbolic ``links`` (path -> target),
    their parent directories included, owned by root, stamped at the epoch (reproducible)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        directories = sorted(
            {str(Path(p).parents[i]) for p in [*files, *links] for i in range(len(Path(p).parts))}
            - {"."}
        )
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, (content, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
        for path, target in sorted(links.items()):
            info = tarfile.TarInfo(path)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buffer.getvalue()


def write_archive(
    target: Path, reference: str, layer: bytes, entrypoint: list[str], cmd: list[str]
) -> LocalImage:
    """``target`` as a docker archive of one image: ``reference`` over one ``layer``."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": entrypoint,
                "Cmd": cmd,
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "nodefence-sim"}],
        },
        sort_keys=True,
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [reference], "Layers": [layer_name]}]
    ).encode()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in (
            (config_name, config),
            (layer_name, layer),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return LocalImage(reference, target)


def pause_image(pause_binary: Path, workdir: Path) -> LocalImage:
    if not pause_binary.is_file():
        raise ImageError(
            f"the pause binary {pause_binary} is absent: `make controlplane` builds it beside "
            "nodefence-controlplane"
        )
    layer = _layer({"pause": (pause_binary.read_bytes(), 0o755)}, {})
    return write_archive(workdir / "pause.tar", PAUSE, layer, ["/pause"], [])


def busybox_image(workdir: Path) -> LocalImage:
    if not BUSYBOX_BINARY.is_file():
        raise ImageError(f"{BUSYBOX_BINARY} is absent: install Debian's busybox-static")
    applets = subprocess.run(
        [str(BUSYBOX_BINARY), "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    links = {f"bin/{applet}": "busybox" for applet in applets if applet != "busybox"}
    layer = _layer(
        {"bin/busybox": (BUSYBOX_BINARY.read_bytes(), 0o755), "tmp/.keep": (b"", 0o644)}, links
    )
    return write_archive(workdir / "busybox.tar", BUSYBOX, layer, [], ["/bin/sh"])
