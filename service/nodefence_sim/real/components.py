"""The real control plane's processes, started from the one ``nodefence-controlplane`` binary
as ``controlplane/smoke.sh`` starts them: embedded etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, and one kwok per node (``--manage-single-node``), so that one node's kubelet can
die (its kwok killed) while the others keep their heartbeats.

Every component has its own user in the static tokens file, so the API server tells their
requests apart (its logs, and any audit policy, name the user); all of them are in
``system:masters`` because this cluster exists only for the run and RBAC bootstrapping is not
what it is for. The exceptions are what runs on the real nodes: their kubelets
(``system:node:<name>``) and kube-proxy (``system:kube-proxy``) have the permissions the
bootstrap RBAC gives them, as on a real cluster. The API server shows those kubelets a client
certificate of the run's CA, and dials each one by the node's name (its ``Hostname`` address),
which its own ``/etc/hosts`` resolves to the loopback address where the real nodes' network is
bridged to that kubelet's port (``machines.ClusterNetwork``): ``kubectl logs``, ``exec`` and
``port-forward`` reach the real nodes' pods. Unlike a hardened cluster's, it does
not verify the kubelets' self-signed serving certificates (no
``--kubelet-certificate-authority``). Each process writes to its
own log file in the run's directory (a full pipe would block it), and every process started is
killed when the run ends, also when the parent dies first (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from nodefence_sim.real.audit import AuditLog, write_audit_policy
from nodefence_sim.real.pki import Pki, make_pki

BINARY_ENV = "NODEFENCE_CONTROLPLANE"
BINARY_NAME = "nodefence-controlplane"
COMPONENT_GROUPS = "system:masters,nodefence-sim:components"
QUIET_GROUP = "nodefence-sim:components"
# A real kubelet's group: the Node authorizer and NodeRestriction judge its requests.
NODES = "system:nodes"
# The API server's own loopback client, which the audit log leaves out like the components.
APISERVER_LOOPBACK = "system:apiserver"
ADMIN = "admin"
HARNESS = "nodefence-sim:harness"
CONTROLLER_MANAGER = "system:kube-controller-manager"
SCHEDULER = "system:kube-scheduler"
# The real nodes' kube-proxy: the user the bootstrap ClusterRoleBinding system:node-proxier binds,
# in the quiet group only (the audit log leaves its watches out), not in system:masters.
KUBE_PROXY = "system:kube-proxy"
# The CSI sidecars (external-provisioner and external-attacher), when the run has a CSI driver.
CSI_SIDECARS = "nodefence-sim:csi-sidecars"
# Sends the audit log's barrier requests; authenticated, in no group with any permission.
AUDIT_BARRIER = "nodefence-sim:audit-barrier"
# kwok renews a Lease every quarter of its duration; 40s is the kubelet's default.
NODE_LEASE_SECONDS = 40
# The one kwok of a large cluster (``start_shared_kwok``) and the label that makes a node its
# own: thousands of nodes in one process, where one kwok a node would be a process a node.
SHARED_KWOK = "nodefence-sim:kwok"
KUBELET_LABEL = "sim.nodefence.io/kubelet"
KUBELET_UP = "up"
SERVICE_CIDR = "10.96.0.0/16"
ETCD_READY = re.compile(r"etcd: ready, client URLs: (http://\S+?)(?:,|\s|$)")
START_TIMEOUT = 180.0
STOP_GRACE = 5.0


class ControlPlaneError(RuntimeError):
    """The control plane could not be found or started; the message says what to do."""


def find_binary() -> Path:
    """``$NODEFENCE_CONTROLPLANE``, else ``nodefence-controlplane`` on PATH."""
    configured = os.environ.get(BINARY_ENV)
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ControlPlaneError(f"{BINARY_ENV}={configured} is not an executable file")
        return path
    found = shutil.which(BINARY_NAME)
    if found is None:
        raise ControlPlaneError(
            f"the real control plane's binary was not found: set {BINARY_ENV} to its path or put "
            f"{BINARY_NAME} on PATH; a source checkout builds it with `make controlplane` "
            "(which prints its path last)"
        )
    return Path(found)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Resolved once here: the child calls it between fork and exec, where loading a library could
# wait forever on a lock another thread of the parent held at the fork.
_PR_SET_PDEATHSIG = 1
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def _die_with_parent() -> None:
    """Run in the child before exec: the kernel kills it if this process dies first, so a
    killed ``simulate`` leaves no API server or kwok behind."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _poll(probe: Callable[[], bool], within: float, what: str, alive: Callable[[], None]) -> None:
    deadline = time.monotonic() + within
    while not probe():
        alive()
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"{what} not ready within {within:.0f}s")
        time.sleep(0.25)


def _healthy(url: str, context: ssl.SSLContext, token: str | None = None) -> bool:
    request = urllib.request.Request(url)  # noqa: S310 - loopback https
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:  # noqa: S310
            return int(response.status) == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


@dataclass
class Component:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ControlPlane:
    """One run's control plane in ``workdir``; :meth:`start` brings up everything but kwok."""

    binary: Path
    workdir: Path
    node_names: Iterable[str]
    node_monitor_grace_period: str = "50s"
    # Nodes run by real kubelets: their identities are in system:nodes, not the components'.
    real_node_names: Iterable[str] = ()
    # The kubernetes Service's endpoint. The API server listens on this machine's loopback
    # only, but a loopback address is not a valid endpoint: with real nodes, the address where
    # their network reaches this machine.
    advertise_address: str = "127.0.0.1"
    # Where the API server dials a real node's kubelet (name -> an address on this machine's
    # loopback): its /etc/hosts, in a mount namespace of its own, gives each name its address.
    kubelet_hosts: Mapping[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    components: dict[str, Component] = field(default_factory=dict)
    kwok: dict[str, Component] = field(default_factory=dict)
    api_port: int = 0
    pki: Pki | None = None
    audit: AuditLog | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca_cert(self) -> Path:
        assert self.pki is not None, "start() first"
        return self.pki.ca_cert

    def kubeconfig_for(self, user: str) -> Path:
        return self.workdir / "kubeconfigs" / f"{user.replace(':', '_')}.yaml"

    # ----------------------------------------------------------------- start and stop
    def start(self) -> None:
        self.pki = make_pki(self.workdir)
        self._write_tokens()
        etcd = self._spawn(
            "etcd",
            [
                "etcd",
                f"--data-dir={self.workdir / 'etcd'}",
                "--listen-client-urls=http://127.0.0.1:0",
                "--unsafe-no-fsync",
            ],
        )
        etcd_url = ""

        def etcd_ready() -> bool:
            nonlocal etcd_url
            found = ETCD_READY.search(etcd.log.read_text(errors="replace"))
            etcd_url = found.group(1) if found else ""
            return bool(etcd_url)

        _poll(etcd_ready, START_TIMEOUT, "etcd", self.check_alive)
        self.api_port = free_port()
        self._write_kubeconfigs()
        pki = self.pki
        policy = write_audit_policy(
            self.workdir / "audit-policy.yaml", [APISERVER_LOOPBACK], [QUIET_GROUP]
        )
        audit_log = self.workdir / "audit.log"
        self._spawn(
            "apiserver",
            [
                "apiserver",
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                f"--advertise-address={self.advertise_address}",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={audit_log}",
                # What it shows a kubelet (logs, exec, port-forward); the kubelets' serving
                # certificates are self-signed and not verified.
                f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                f"--kubelet-client-key={pki.kubelet_client_key}",
            ],
            wrapper=self._kubelet_names(),
        )
        verified = ssl.create_default_context(cafile=str(pki.ca_cert))
        self.audit = AuditLog(
            audit_log, self.server, pki.ca_cert, AUDIT_BARRIER, self.tokens[AUDIT_BARRIER]
        )
        _poll(
            lambda: _healthy(f"{self.server}/readyz", verified, self.tokens[ADMIN]),
            START_TIMEOUT,
            "kube-apiserver",
            self.check_alive,
        )
        kcm_port, scheduler_port = free_port(), free_port()
        kcm = self.kubeconfig_for(CONTROLLER_MANAGER)
        self._spawn(
            "controller-manager",
            [
                "controller-manager",
                f"--kubeconfig={kcm}",
                f"--authentication-kubeconfig={kcm}",
                f"--authorization-kubeconfig={kcm}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--controllers=*",
                "--leader-elect=false",
                f"--root-ca-file={pki.ca_cert}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--node-monitor-grace-period={self.node_monitor_grace_period}",
            ],
        )
        scheduler = self.kubeconfig_for(SCHEDULER)
        self._spawn(
            "scheduler",
            [
                "scheduler",
                f"--kubeconfig={scheduler}",
                f"--authentication-kubeconfig={scheduler}",
                f"--authorization-kubeconfig={scheduler}",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                "--leader-elect=false",
            ],
        )
        # Their serving certificates are self-signed at start; only their health is asked.
        unverified = ssl._create_unverified_context()  # noqa: S323 - loopback health probe
        for name, port in (
            ("kube-controller-manager", kcm_port),
            ("kube-scheduler", scheduler_port),
        ):
            probe = functools.partial(_healthy, f"https://127.0.0.1:{port}/healthz", unverified)
            _poll(probe, START_TIMEOUT, name, self.check_alive)

    def start_kwok(self, node: str, cidr: str, node_ip: str) -> None:
        """Start the kubelet of ``node``: a kwok that manages that node alone."""
        if node in self.kwok and self.kwok[node].alive():
            return
        self.kwok[node] = self._spawn(
            f"kwok-{node}",
            [
                "kwok",
                f"--kubeconfig={self.kubeconfig_for(f'system:node:{node}')}",
                f"--manage-single-node={node}",
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                f"--cidr={cidr}",
                f"--node-ip={node_ip}",
            ],
            register=False,
        )

    def start_shared_kwok(self) -> None:
        """Start one kwok for every node labelled ``KUBELET_LABEL=up``. A node whose label is
        taken away leaves its watch (the API server says it was deleted from the selection):
        kwok stops renewing its Lease and reporting its status and writes nothing more, as for
        a kubelet that died."""
        self._spawn(
            "kwok",
            [
                "kwok",
                f"--kubeconfig={self.kubeconfig_for(SHARED_KWOK)}",
                f"--manage-nodes-with-label-selector={KUBELET_LABEL}={KUBELET_UP}",
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                # A line for every Lease renewal is 200 lines a second at 2,000 nodes.
                "--v=WARN",
            ],
        )

    def kill_kwok(self, node: str) -> None:
        """SIGKILL: a kubelet that dies says nothing to the API server on its way out."""
        component = self.kwok.get(node)
        if component is not None and component.alive():
            component.popen.kill()
            component.popen.wait()

    def kwok_running(self, node: str) -> bool:
        component = self.kwok.get(node)
        return component is not None and component.alive()

    def stop(self) -> None:
        """Stop the kubelets first, then the control plane in reverse order of start."""
        everything = [*self.kwok.values(), *reversed(list(self.components.values()))]
        for component in everything:
            if component.alive():
                with contextlib.suppress(ProcessLookupError):
                    component.popen.terminate()
        deadline = time.monotonic() + STOP_GRACE
        for component in everything:
            try:
                component.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                component.popen.kill()
                component.popen.wait()

    # ----------------------------------------------------------------- internals
    def _kubelet_names(self) -> list[str]:
        """With real nodes, what the API server runs under: a mount namespace of its own whose
        ``/etc/hosts`` adds the nodes' names (which a node reports as its ``Hostname`` address,
        the first the API server dials a kubelet by) at ``kubelet_hosts``' addresses. Its
        network stays this machine's."""
        if not self.kubelet_hosts:
            return []
        hosts = self.workdir / "hosts"
        added = "".join(f"{address} {name}\n" for name, address in self.kubelet_hosts.items())
        hosts.write_text(f"{Path('/etc/hosts').read_text()}\n{added}")
        return [
            "unshare",
            "--mount",
            "--propagation=private",
            "--",
            "sh",
            "-ec",
            'mount --bind "$0" /etc/hosts; exec "$@"',
            str(hosts),
        ]

    def _write_tokens(self) -> None:
        users = [ADMIN, HARNESS, CONTROLLER_MANAGER, SCHEDULER, AUDIT_BARRIER, SHARED_KWOK]
        users.append(CSI_SIDECARS)
        users += [f"system:node:{node}" for node in self.node_names]
        real = {f"system:node:{node}" for node in self.real_node_names}
        if real:
            users.append(KUBE_PROXY)
        lines = []
        for user in [*users, *sorted(real)]:
            token = secrets.token_urlsafe(24)
            self.tokens[user] = token
            groups = {
                ADMIN: "system:masters",
                AUDIT_BARRIER: "nodefence-sim:audit",
                KUBE_PROXY: QUIET_GROUP,
            }.get(user, NODES if user in real else COMPONENT_GROUPS)
            lines.append(f'{token},{user},{user},"{groups}"')
        tokens = self.workdir / "tokens.csv"
        tokens.write_text("\n".join(lines) + "\n")
        tokens.chmod(0o600)

    def _write_kubeconfigs(self) -> None:
        (self.workdir / "kubeconfigs").mkdir(exist_ok=True)
        for user in self.tokens:
            path = self.kubeconfig_for(user)
            path.touch(mode=0o600)
            path.write_text(yaml.safe_dump(self.kubeconfig(user), sort_keys=False))

    def kubeconfig(self, user: str, namespace: str = "default") -> dict[str, object]:
        """A kubeconfig for ``user`` (token and the run's CA), pointed at this API server."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "nodefence-sim-real",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_cert)},
                }
            ],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [
                {
                    "name": "nodefence-sim-real",
                    "context": {
                        "cluster": "nodefence-sim-real",
                        "user": user,
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": "nodefence-sim-real",
            "preferences": {},
        }

    def run_component(self, name: str, argv: list[str]) -> Component:
        """Start another binary as a component of this control plane (``argv[0]`` its path):
        checked by :meth:`check_alive`, stopped with the rest."""
        component = Component(name, self.spawn_command(name, argv), self.workdir / f"{name}.log")
        self.components[name] = component
        return component

    def _spawn(
        self, name: str, argv: list[str], *, register: bool = True, wrapper: Sequence[str] = ()
    ) -> Component:
        component = Component(
            name,
            self.spawn_command(name, [*wrapper, str(self.binary), *argv]),
            log=self.workdir / f"{name}.log",
        )
        if register:
            self.components[name] = component
        return component

    def spawn_command(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """``argv`` as a process of this run: its output in ``<name>.log``, a session of its
        own, killed if this process dies first."""
        log = self.workdir / f"{name}.log"
        # kwok writes its stages to a temporary directory it removes on exit; a kwok killed by
        # ``down`` cannot, so its leftovers go into the run's directory, removed with it.
        scratch = self.workdir / "tmp"
        scratch.mkdir(exist_ok=True)
        with log.open("wb") as sink:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={**os.environ, "TMPDIR": str(scratch)},
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads run at spawn time
            )
        return popen

    def check_alive(self) -> None:
        for component in self.components.values():
            if not component.alive():
                raise ControlPlaneError(
                    f"{component.name} exited with {component.popen.returncode}:\n"
                    + component.tail()
                )
