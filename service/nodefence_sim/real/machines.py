"""Real nodes: machines on this one machine, each a real kubelet with its own containerd, runc
and CNI bridge, so that the product meets what a kubelet, a container and a dead machine really
do, beside the kwok nodes that give the cluster its size.

A machine is a PID and mount namespace (``unshare``) whose first process is ``pause``: killing
it kills every process of the machine, kubelet, containerd, shims and containers alike, as a
power cut does, and its mounts go with its mount namespace. Inside it, before anything starts,
the machine is given what a machine of its own would show: its boot ID (a new one at each power
on), its DMI ``product_uuid`` (the ``systemUUID`` its BMC reports) and the kernel settings the
kubelet checks (``protectKernelDefaults``), as files bind-mounted over the machine's, so no
kubelet rewrites this machine's sysctls. With a CSI driver (``storage``), the machine also runs
the driver's node plugin, registered with its kubelet: it stages and publishes the volumes of
the machine's pods in the machine's mount namespace, and dies with the machine.

Every machine lives in one network namespace for the cluster: its node IP on that namespace's
loopback, its pods on a bridge of its own, so pods on two nodes reach each other. The API server
stays on this machine's loopback; in the cluster's namespace ``socat`` answers on the same
address and port (for the kubeconfigs) and on ``HOST_IN_CLUSTER`` (the API server's advertise
address, so the ``kubernetes`` Service's endpoint), through a Unix socket, so the kubelets and
the pods reach it without a rule in this machine's firewall. The other way, each kubelet's port
(10250 on its node IP) is bridged the same way to an address of its own on this machine's
loopback (``kubelet_addresses``), which the API server's ``/etc/hosts`` gives the node's name:
the API server dials a kubelet by that name, as in a cluster, for ``kubectl logs``, ``exec`` and
``port-forward``, with its client certificate of the run's CA (the kubelets' ``clientCAFile``).
One kube-proxy (iptables mode, as
the first real node's) writes every Service's rules in that namespace only: pods and processes
of the namespace reach Services by their ClusterIP; its rules go with the namespace.

Each kubelet is ``system:node:<name>`` in ``system:nodes``, judged by the Node authorizer and
NodeRestriction as a real node is. Everything is removed at :meth:`RealMachines.stop`: the
network namespace, the cgroups, the processes (``PR_SET_PDEATHSIG`` kills them with the
simulator too).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from nodefence_sim.real.components import SERVICE_CIDR
from nodefence_sim.real.images import PAUSE
from nodefence_sim.real.storage import Storage

CNI_BIN = Path("/usr/lib/cni")
CGROUP_V1 = Path("/sys/fs/cgroup")
# The real nodes' IPs (10.200.0.<n>) and HOST_IN_CLUSTER.
NODE_NETWORK = "10.200.0.0/24"
# The real nodes' pods, one /24 a node.
CLUSTER_CIDR = "10.201.0.0/16"
# kube-proxy's health and metrics, on the cluster namespace's own loopback (below the ephemeral
# ports the socat listeners and containerd's stream servers get there): its usual ports.
PROXY_HEALTHZ = "127.0.0.1:10256"
PROXY_METRICS = "127.0.0.1:10249"
# Every kubelet's port on its node IP, as in a cluster.
KUBELET_PORT = 10250
# Where pods on real nodes reach this machine's loopback services (the control surface and the
# BMCs): a BMC network of their own, as a real cluster's nodes reach their BMCs.
HOST_IN_CLUSTER = "10.200.0.254"
# The kernel settings a kubelet with protectKernelDefaults checks, as it wants them.
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}
START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
# What the tools this needs come from, for the error that names a missing one.
TOOLS = {
    "containerd": "containerd",
    "runc": "runc",
    "ctr": "containerd",
    "socat": "socat",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "ip": "iproute2",
    # kube-proxy's rules, and the check that they are written.
    "iptables": "iptables",
    "iptables-restore": "iptables",
}


class MachineError(RuntimeError):
    """A real node could not be set up or started; the message says what is missing."""


def check_tools() -> None:
    missing = [f"{tool} (Debian: {pkg})" for tool, pkg in TOOLS.items() if not shutil.which(tool)]
    if not (CNI_BIN / "bridge").is_file():
        missing.append(f"{CNI_BIN}/bridge (Debian: containernetworking-plugins)")
    if missing:
        raise MachineError("real nodes need " + ", ".join(missing))


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise MachineError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _wait(probe: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not probe():
        if time.monotonic() > deadline:
            raise MachineError(f"{what} not within {within:.0f}s")
        time.sleep(0.2)


def _kill_group(popen: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL a process started in a session of its own and everything in that session's
    group (``nsenter`` and the daemon it started)."""
    if popen is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()


@dataclass
class ClusterNetwork:
    """The network namespace every real node lives in, and the API server reached from it."""

    name: str
    workdir: Path
    api_port: int
    spawn: Callable[[str, list[str]], subprocess.Popen[bytes]]
    bridges: list[subprocess.Popen[bytes]] = field(default_factory=list)
    proxy: subprocess.Popen[bytes] | None = None

    @property
    def path(self) -> str:
        return f"/run/netns/{self.name}"

    def start(self) -> None:
        _run(["ip", "netns", "add", self.name])
        self._ip("link", "set", "lo", "up")
        self._ip("addr", "add", f"{HOST_IN_CLUSTER}/32", "dev", "lo")
        # A route for the Services' addresses, so that a process of this namespace (not only
        # a pod) can connect to one: kube-proxy's DNAT picks the endpoint after that lookup.
        self._ip("route", "add", "local", SERVICE_CIDR, "dev", "lo")
        _run(["ip", "netns", "exec", self.name, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        # The same address and port the kubeconfigs name, and the kubernetes Service's
        # endpoint (the API server's advertise address), where kube-proxy sends its ClusterIP.
        self._forward(
            self.api_port, [("127.0.0.1", self.api_port), (HOST_IN_CLUSTER, self.api_port)]
        )

    def start_proxy(self, binary: Path, kubeconfig: Path, hostname: str) -> None:
        """One kube-proxy (iptables mode) for the whole namespace, as ``hostname``'s: every
        node shares its rules, so one is all the namespace has room for. Started once the
        nodes are registered (it reads its node's addresses); back once the ``kubernetes``
        Service's rules are written."""
        config = self.workdir / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(_proxy_config(kubeconfig, hostname), sort_keys=False))
        self.proxy = self.spawn(
            "kube-proxy",
            ["nsenter", f"--net={self.path}", str(binary), "proxy", f"--config={config}", "--v=1"],
        )

        def synced() -> bool:
            if self.proxy is None or self.proxy.poll() is not None:
                raise MachineError(f"kube-proxy exited; its log is {self.workdir}/kube-proxy.log")
            rules = subprocess.run(
                ["ip", "netns", "exec", self.name, "iptables", "-t", "nat", "-S", "KUBE-SERVICES"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            return "default/kubernetes:https cluster IP" in rules

        _wait(synced, START_TIMEOUT, "kube-proxy's rules for the kubernetes Service")

    def expose(self, port: int) -> str:
        """This machine's loopback ``port`` for the pods, at ``HOST_IN_CLUSTER``; its URL."""
        self._forward(port, [(HOST_IN_CLUSTER, port)])
        return f"http://{HOST_IN_CLUSTER}:{port}"

    def _forward(self, port: int, listeners: list[tuple[str, int]]) -> None:
        """``socat`` from ``listeners`` in the cluster's namespace to this machine's loopback
        ``port``, through a Unix socket (which, unlike a TCP port, both namespaces see)."""
        socket = self.workdir / f"loopback-{port}.sock"
        self.bridges.append(
            self.spawn(
                f"forward-{port}",
                ["socat", f"UNIX-LISTEN:{socket},fork,mode=600", f"TCP:127.0.0.1:{port}"],
            )
        )
        _wait(socket.exists, START_TIMEOUT, f"the socket in front of port {port}")
        for address, listen in listeners:
            self.bridges.append(
                self.spawn(
                    f"forward-{address}-{listen}",
                    [
                        "nsenter",
                        f"--net={self.path}",
                        "socat",
                        f"TCP-LISTEN:{listen},bind={address},fork,reuseaddr",
                        f"UNIX-CONNECT:{socket}",
                    ],
                )
            )

    def reach_kubelet(self, node_ip: str, address: str) -> None:
        """The kubelet's port at ``node_ip`` in the cluster's namespace, at ``address`` (on this
        machine's loopback) for the API server: ``_forward`` the other way round."""
        unix = self.workdir / f"kubelet-{node_ip}.sock"
        self.bridges.append(
            self.spawn(
                f"kubelet-port-{node_ip}",
                [
                    "nsenter",
                    f"--net={self.path}",
                    "socat",
                    f"UNIX-LISTEN:{unix},fork,mode=600",
                    f"TCP:{node_ip}:{KUBELET_PORT}",
                ],
            )
        )
        _wait(unix.exists, START_TIMEOUT, f"the socket in front of {node_ip}:{KUBELET_PORT}")
        self.bridges.append(
            self.spawn(
                f"kubelet-port-{address}",
                [
                    "socat",
                    f"TCP-LISTEN:{KUBELET_PORT},bind={address},fork,reuseaddr",
                    f"UNIX-CONNECT:{unix}",
                ],
            )
        )

    def _ip(self, *args: str) -> None:
        _run(["ip", "-n", self.name, *args])

    def add_address(self, address: str) -> None:
        self._ip("addr", "add", f"{address}/32", "dev", "lo")

    def stop(self) -> None:
        # Its rules are the namespace's: they go with it.
        _kill_group(self.proxy)
        self.proxy = None
        for bridge in self.bridges:
            _kill_group(bridge)
        with contextlib.suppress(MachineError):
            _run(["ip", "netns", "delete", self.name])


def _proxy_config(kubeconfig: Path, hostname: str) -> dict[str, object]:
    """kube-proxy's KubeProxyConfiguration: nothing it sets leaves the cluster's namespace."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": hostname,
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        "detectLocalMode": "ClusterCIDR",
        # Without br_netfilter, a pod's reply to a pod on its own bridge would skip the
        # un-DNAT: masqueraded, every reply comes back through this namespace's routing.
        "iptables": {"masqueradeAll": True},
        # NodePorts on every node's IP, as each node's kube-proxy would open them; not on the
        # loopback, so it needs no route_localnet.
        "nodePortAddresses": [NODE_NETWORK],
        # nf_conntrack_max and the conntrack hash size are this machine's, not the
        # namespace's: 0 leaves them, and the timeouts, as they are.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        # Its own OOM score would be -999, which this machine kind does not let it set.
        "oomScoreAdj": 0,
        "healthzBindAddress": PROXY_HEALTHZ,
        "metricsBindAddress": PROXY_METRICS,
    }


@dataclass
class Machine:
    """One real node's machine: its files in ``workdir``, its processes while powered on."""

    name: str
    index: int
    workdir: Path
    system_uuid: str
    node_ip: str
    pod_cidr: str
    network: ClusterNetwork
    binary: Path
    pause: Path
    kubeconfig: Path
    ca_cert: Path
    # Docker archives still to import into the machine's containerd (at its first boot).
    images: list[Path]
    spawn: Callable[[str, list[str]], subprocess.Popen[bytes]]
    # The CSI driver whose node plugin the machine runs, when the run has one.
    storage: Storage | None = None
    boot_id: str = ""
    init: subprocess.Popen[bytes] | None = None
    containerd: subprocess.Popen[bytes] | None = None
    csi: subprocess.Popen[bytes] | None = None
    kubelet: subprocess.Popen[bytes] | None = None

    @property
    def cgroup(self) -> str:
        """Named after the run's network namespace too: two runs on one machine each have a
        real01, and neither may take the other's cgroups away when it stops."""
        return f"{self.network.name}-{self.name}"

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd.sock"

    def powered(self) -> bool:
        return self.init is not None and self.init.poll() is None

    def kubelet_running(self) -> bool:
        return self.kubelet is not None and self.kubelet.poll() is None

    # ------------------------------------------------------------------ power
    def power_on(self) -> None:
        """Boot: a new boot ID, the machine's namespaces, containerd with the local images,
        then the kubelet."""
        if self.powered():
            return
        try:
            self._boot()
        except BaseException:
            self.power_off()
            raise
        self.start_kubelet()

    def _boot(self) -> None:
        self._write_files()
        self._make_cgroups()
        self.boot_id = str(uuid.uuid4())
        (self.workdir / "boot_id").write_text(self.boot_id + "\n")
        (self.workdir / "booted").unlink(missing_ok=True)
        self.init = self.spawn(
            f"{self.name}-machine",
            [
                "nsenter",
                f"--net={self.network.path}",
                "unshare",
                "--pid",
                "--fork",
                "--kill-child=SIGKILL",
                "--mount",
                "--propagation=private",
                "--mount-proc",
                "sh",
                "-ec",
                self._boot_script(),
            ],
        )
        _wait(self._booted, START_TIMEOUT, f"machine {self.name} booted")
        self.containerd = self.spawn(
            f"{self.name}-containerd",
            [*self._enter(), "containerd", "--config", str(self.workdir / "containerd.toml")],
        )
        _wait(self._containerd_up, START_TIMEOUT, f"containerd of {self.name}")
        # Once: containerd's store is the machine's disk, which a power cycle keeps.
        while self.images:
            _run(self._ctr("images", "import", str(self.images[0])))
            self.images.pop(0)
        if self.storage is not None:
            # Started before the kubelet, whose plugin watcher finds its registration socket.
            (self.workdir / "kubelet" / "plugins_registry").mkdir(parents=True, exist_ok=True)
            argv = self.storage.node_plugin(self.name, self.workdir, self.workdir / "kubelet")
            self.csi = self.spawn(f"{self.name}-csi", [*self._enter(), *argv])

    def power_off(self) -> None:
        """A power cut: every process of the machine dies at once, nothing says goodbye."""
        if self.init is not None:
            _kill_group(self.init)
        for popen in (self.kubelet, self.csi, self.containerd):
            if popen is not None:
                _kill_group(popen)
        self.init = self.kubelet = self.csi = self.containerd = None

    def start_kubelet(self) -> None:
        if self.kubelet_running() or not self.powered():
            return
        self.kubelet = self.spawn(
            f"{self.name}-kubelet",
            [
                *self._enter(),
                str(self.binary),
                "kubelet",
                f"--config={self.workdir / 'kubelet.yaml'}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.workdir / 'kubelet'}",
                f"--cert-dir={self.workdir / 'kubelet' / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.node_ip}",
                "--node-labels=sim.nodefence.io/kubelet=real",
                "--v=1",
            ],
        )

    def kill_kubelet(self) -> None:
        """The kubelet dies; the machine, containerd and the containers run on."""
        _kill_group(self.kubelet)
        self.kubelet = None

    def remove_cgroups(self) -> list[Path]:
        """Remove the machine's cgroups; those still in use (a process that has not exited
        yet) are returned."""
        # The cgroup v2 mount too: runc makes the containers' cgroups there as well.
        hierarchies = self._hierarchies(with_unified=True)
        for hierarchy in hierarchies:
            root = hierarchy / self.cgroup
            if not root.exists():
                continue
            # Deepest first: a cgroup is removed only once it has no children.
            for directory in sorted(
                (p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()
        return [h / self.cgroup for h in hierarchies if (h / self.cgroup).exists()]

    # ------------------------------------------------------------------ internals
    def _enter(self) -> list[str]:
        assert self.init is not None
        return [
            "nsenter",
            f"--target={self._machine_pid()}",
            "--pid",
            "--mount",
            "--net",
        ]

    def _machine_pid(self) -> int:
        """The machine's first process (``unshare``'s child) as this machine sees it."""
        assert self.init is not None
        children = Path(f"/proc/{self.init.pid}/task/{self.init.pid}/children")
        for line in children.read_text().split():
            return int(line)
        raise MachineError(f"machine {self.name} has no first process")

    def _booted(self) -> bool:
        if self.init is None or self.init.poll() is not None:
            raise MachineError(f"machine {self.name} exited at boot")
        return (self.workdir / "booted").exists()

    def _containerd_up(self) -> bool:
        if self.containerd is None or self.containerd.poll() is not None:
            raise MachineError(f"containerd of {self.name} exited")
        if not self.socket.exists():
            return False
        return (
            subprocess.run(self._ctr("version"), capture_output=True, check=False).returncode == 0
        )

    def _ctr(self, *args: str) -> list[str]:
        return ["ctr", f"--address={self.socket}", "--namespace=k8s.io", *args]

    def _boot_script(self) -> str:
        """What the machine's first process does before it becomes ``pause``: the files that
        make this machine its own, bind-mounted in its own mount namespace."""
        w = self.workdir
        lines = [
            f"mount --bind {w}/boot_id /proc/sys/kernel/random/boot_id",
        ]
        lines += [
            f"mount --bind {w}/sysctl/{key.replace('/', '.')} /proc/sys/{key}"
            for key in KERNEL_DEFAULTS
        ]
        # No DMI in this machine's sysfs, or the host's: /sys/class becomes a copy of itself
        # plus the machine's dmi/id/product_uuid.
        lines += [
            f"mkdir -p {w}/sysclass",
            f"mount --bind /sys/class {w}/sysclass",
            "mount -t tmpfs -o mode=755 sysclass /sys/class",
            f"for entry in $(ls {w}/sysclass); do"
            f' [ "$entry" = dmi ] && continue; mkdir /sys/class/$entry;'
            f" mount --bind {w}/sysclass/$entry /sys/class/$entry; done",
            "mkdir -p /sys/class/dmi/id",
            f"cp {w}/product_uuid /sys/class/dmi/id/product_uuid",
            f"mount --bind {w}/machine-id /etc/machine-id",
            # What a kubelet and containerd write outside their own directories (pod logs,
            # runc's state, shim sockets) stays the machine's.
            f"mkdir -p {w}/var-log",
            f"mount --bind {w}/var-log /var/log",
            "mount -t tmpfs -o mode=755 run /run",
            f"touch {w}/booted",
            f"exec {self.pause}",
        ]
        return "\n".join(lines)

    def _hierarchies(self, *, with_unified: bool = False) -> list[Path]:
        return [
            p
            for p in sorted(CGROUP_V1.iterdir())
            if p.is_dir() and not p.is_symlink() and (with_unified or p.name != "unified")
        ]

    def _make_cgroups(self) -> None:
        """The kubelet's cgroupRoot in every cgroup v1 hierarchy; cpuset's seeded from its
        parent's, which a new cpuset does not inherit."""
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup
            root.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (root / name).write_text((hierarchy / name).read_text())

    def _write_files(self) -> None:
        w = self.workdir
        (w / "sysctl").mkdir(parents=True, exist_ok=True)
        for key, value in KERNEL_DEFAULTS.items():
            (w / "sysctl" / key.replace("/", ".")).write_text(value + "\n")
        (w / "product_uuid").write_text(self.system_uuid + "\n")
        (w / "machine-id").write_text(self.system_uuid.replace("-", "") + "\n")
        (w / "cni").mkdir(exist_ok=True)
        (w / "cni" / "10-bridge.conflist").write_text(self._cni())
        (w / "containerd.toml").write_text(self._containerd_config())
        (w / "kubelet.yaml").write_text(yaml.safe_dump(self._kubelet_config(), sort_keys=False))

    def _cni(self) -> str:
        return json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": f"nodefence-sim-{self.name}",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": f"nfsim{self.index}",
                        "isGateway": True,
                        "ipMasq": False,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": self.pod_cidr}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(self.workdir / "cni-ipam"),
                        },
                    },
                    {"type": "loopback"},
                ],
            },
            indent=2,
        )

    def _containerd_config(self) -> str:
        w = self.workdir
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return "\n".join(
            [
                "version = 2",
                f'root = "{w}/containerd/root"',
                f'state = "{w}/containerd/state"',
                "[grpc]",
                f'  address = "{self.socket}"',
                "[ttrpc]",
                f'  address = "{w}/containerd-ttrpc.sock"',
                "[debug]",
                '  address = ""',
                "[metrics]",
                '  address = ""',
                '[plugins."io.containerd.internal.v1.opt"]',
                f'  path = "{w}/containerd/opt"',
                f"[{cri}]",
                f'  sandbox_image = "{PAUSE}"',
                "  restrict_oom_score_adj = true",
                "  netns_mounts_under_state_dir = true",
                '  stream_server_address = "127.0.0.1"',
                '  stream_server_port = "0"',
                f"[{cri}.containerd]",
                '  snapshotter = "overlayfs"',
                '  default_runtime_name = "runc"',
                f"[{cri}.containerd.runtimes.runc]",
                '  runtime_type = "io.containerd.runc.v2"',
                f"[{cri}.containerd.runtimes.runc.options]",
                "  SystemdCgroup = false",
                f"[{cri}.cni]",
                f'  bin_dir = "{CNI_BIN}"',
                f'  conf_dir = "{w}/cni"',
                "",
            ]
        )

    def _kubelet_config(self) -> dict[str, object]:
        off = "0%"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine kind has cgroup v1 only; containerd 1.6 does not report its driver.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.node_ip,
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": self.node_ip,
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.ca_cert)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "protectKernelDefaults": True,
            "failSwapOn": False,
            "resolvConf": "",
            "volumePluginDir": str(self.workdir / "volume-plugins"),
            "podCIDR": self.pod_cidr,
            "providerID": f"nodefence-sim://{self.name}",
            # Many nodes share one disk here: no node evicts or collects images for it.
            "evictionHard": {
                "memory.available": off,
                "nodefs.available": off,
                "imagefs.available": off,
                "nodefs.inodesFree": off,
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
        }


@dataclass
class RealMachines:
    """The real nodes of one run, in ``workdir``: their network, images and machines."""

    workdir: Path
    network: ClusterNetwork
    machines: dict[str, Machine] = field(default_factory=dict)

    def start_proxy(self, binary: Path, kubeconfig: Path) -> None:
        """kube-proxy for the Services, as the first real node's (its Node registered)."""
        self.network.start_proxy(binary, kubeconfig, next(iter(self.machines)))

    def stop(self) -> None:
        for machine in self.machines.values():
            machine.power_off()
        for machine in self.machines.values():
            _wait_removed(machine)
        self.network.stop()


def _wait_removed(machine: Machine) -> None:
    """The cgroups of a machine that was just killed empty as its processes exit."""
    deadline = time.monotonic() + STOP_TIMEOUT
    while machine.remove_cgroups() and time.monotonic() < deadline:
        time.sleep(0.2)


def real_node_names(count: int) -> list[str]:
    return [f"real{index:02d}" for index in range(1, count + 1)]


def kubelet_addresses(names: list[str]) -> dict[str, str]:
    """Where the API server dials each real node's kubelet: ``127.<a>.<b>.<n>`` for the n-th
    node, on this machine's loopback (all of 127.0.0.0/8 is), with ``<a>.<b>`` picked at random
    among those whose addresses have the kubelet's port free."""
    for _ in range(32):
        prefix = f"127.{1 + secrets.randbelow(254)}.{secrets.randbelow(256)}"
        chosen = {name: f"{prefix}.{index}" for index, name in enumerate(names, start=1)}
        if all(_port_free(address, KUBELET_PORT) for address in chosen.values()):
            return chosen
    raise MachineError(f"no loopback addresses with port {KUBELET_PORT} free for the kubelets")


def _port_free(address: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def start_machines(
    *,
    count: int,
    workdir: Path,
    binary: Path,
    api_port: int,
    ca_cert: Path,
    kubelet_hosts: dict[str, str],
    kubeconfig_for: Callable[[str], Path],
    spawn: Callable[[str, list[str]], subprocess.Popen[bytes]],
    system_uuid: Callable[[str], str],
    extra_images: list[Path],
    storage: Storage | None = None,
) -> RealMachines:
    """Power on ``count`` machines, the local pause and busybox images and ``extra_images``
    (docker archives, as ``docker save`` writes them) in each; their kubelets register their
    Nodes themselves, and their ports are bridged to ``kubelet_hosts`` (name -> address on this
    machine's loopback) for the API server."""
    check_tools()
    for archive in extra_images:
        if not archive.is_file():
            raise MachineError(f"the image archive {archive} is not a file")
    from nodefence_sim.real.images import busybox_image, pause_image

    pause = binary.parent / "pause"
    images = [
        pause_image(pause, workdir / "images").archive,
        busybox_image(workdir / "images").archive,
        *extra_images,
    ]
    network = ClusterNetwork(f"nodefence-sim-{os.getpid()}", workdir, api_port, spawn)
    machines = RealMachines(workdir, network)
    try:
        network.start()
        for index, name in enumerate(real_node_names(count), start=1):
            node_ip = f"10.200.0.{index}"
            network.add_address(node_ip)
            network.reach_kubelet(node_ip, kubelet_hosts[name])
            machine_dir = workdir / "machines" / name
            machine_dir.mkdir(parents=True)
            machine = Machine(
                name=name,
                index=index,
                workdir=machine_dir,
                system_uuid=system_uuid(name),
                node_ip=node_ip,
                pod_cidr=f"10.201.{index}.0/24",
                network=network,
                binary=binary,
                pause=pause,
                kubeconfig=kubeconfig_for(f"system:node:{name}"),
                ca_cert=ca_cert,
                images=list(images),
                spawn=spawn,
                storage=storage,
            )
            machines.machines[name] = machine
            machine.power_on()
    except BaseException:
        machines.stop()
        raise
    return machines
