"""The Prometheus Operator (``github.com/prometheus-operator/prometheus-operator``, built by
``make prometheus-operator`` from ``tools/prometheus-operator``) against the real control plane,
as a process of the host: it turns the monitoring objects nodefence ships (an
AlertmanagerConfig, a PrometheusRule, a PodMonitor) into the configuration the Alertmanager and
Prometheus it manages would run, which is what a test of those objects reads.

Its CRDs come from the operator module's own files, copied beside the binary by the build
(``<cache>/crds/``), and are applied server-side (they are too large for a client-side apply's
annotation) before it starts: the operator looks for them once, at start, and leaves out the
controllers of any it does not find. It runs with the admin kubeconfig, its metrics and health on
loopback, scoped to the namespaces given, and without its kubelet controller (no
``--kubelet-service``), which nothing here needs. The StatefulSets it makes for an Alertmanager
or a Prometheus get pods wherever the cluster schedules them (on kwok nodes they run nothing);
what is read is the configuration it generates: the Secret ``alertmanager-<name>-generated``
(``alertmanager.yaml.gz``), the Secret ``prometheus-<name>`` (``prometheus.yaml.gz``) and the
ConfigMaps ``prometheus-<name>-rulefiles-<n>``.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodefence_sim.errors import ApiError
from nodefence_sim.real.components import _die_with_parent, free_port
from nodefence_sim.real.rest import Rest

BINARY_ENV = "NODEFENCE_PROMETHEUS_OPERATOR"
BINARY_NAME = "prometheus-operator"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "nodefence-sim"
CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
START_WITHIN = 60.0
GENERATED_WITHIN = 120.0
STOP_GRACE = 5.0


class _CrdLoader(yaml.SafeLoader):
    """YAML as the API server reads it: PyYAML's YAML 1.1 "value" tag would make the plain
    scalar ``=`` (an enum value of the CRDs' schemas) an error instead of a string."""


def _value_as_string(loader: _CrdLoader, node: yaml.Node) -> str:
    assert isinstance(node, yaml.ScalarNode)
    return str(loader.construct_scalar(node))


_CrdLoader.add_constructor("tag:yaml.org,2002:value", _value_as_string)


class PrometheusOperatorError(RuntimeError):
    """The operator could not be found, started, or did not generate in time."""


def find_binary() -> Path:
    """``$NODEFENCE_PROMETHEUS_OPERATOR``, else ``prometheus-operator`` on PATH."""
    configured = os.environ.get(BINARY_ENV)
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise PrometheusOperatorError(f"{BINARY_ENV}={configured} is not an executable file")
        return path
    found = shutil.which(BINARY_NAME)
    if found is None:
        raise PrometheusOperatorError(
            f"the Prometheus Operator was not found: set {BINARY_ENV} to its path or put "
            f"{BINARY_NAME} on PATH; a source checkout builds it with `make prometheus-operator` "
            "(which prints its path last)"
        )
    return Path(found)


def crd_files(binary: Path) -> list[Path]:
    """The CRDs of the operator's own release, which the build copies beside its ``bin/``."""
    found = sorted((binary.resolve().parent.parent / "crds").glob("*.yaml"))
    if not found:
        raise PrometheusOperatorError(
            f"no CRDs beside {binary} (expected {binary.parent.parent / 'crds'}/*.yaml, which "
            "`make prometheus-operator` copies from the operator module)"
        )
    return found


def rest_from_kubeconfig(kubeconfig: Path, workdir: Path) -> Rest:
    """A client for the API server a real backend's kubeconfig names (its inline CA written to
    ``workdir``, its bearer token)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = workdir / "kubeconfig-ca.crt"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    return Rest(str(cluster["server"]), ca, str(config["users"][0]["user"]["token"]))


def apply_crds(rest: Rest, files: Iterable[Path], *, within: float = START_WITHIN) -> list[str]:
    """Server-side apply each CRD, then wait until the API server serves every one
    (``Established``); returns their names."""
    names = []
    for path in files:
        for crd in yaml.load_all(path.read_text(), Loader=_CrdLoader):
            if not crd:
                continue
            name = str(crd["metadata"]["name"])
            rest.request(
                "PATCH",
                f"{CRDS_PATH}/{name}?fieldManager={FIELD_MANAGER}&force=true",
                crd,
                content_type=APPLY_PATCH,
            )
            names.append(name)

    def established(name: str) -> bool:
        conditions = rest.get(f"{CRDS_PATH}/{name}").get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    _until(lambda: all(established(n) for n in names), within, "the operator's CRDs established")
    return names


def delete_crds(rest: Rest, names: Iterable[str]) -> None:
    """Remove the CRDs (and with them every object of their kinds); absent ones are fine."""
    for name in names:
        with contextlib.suppress(ApiError):
            rest.delete(f"{CRDS_PATH}/{name}")


def operator_argv(binary: Path, namespaces: Iterable[str], listen: str) -> list[str]:
    """The operator's command line: only ``namespaces`` watched, its web server on ``listen``
    (loopback; its default ``:8080`` is everyone's port), logs as logfmt."""
    return [
        str(binary),
        f"--namespaces={','.join(namespaces)}",
        f"--web.listen-address={listen}",
        "--log-level=info",
    ]


@dataclass
class PrometheusOperator:
    popen: subprocess.Popen[bytes]
    log: Path
    url: str

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=STOP_GRACE)


@contextlib.contextmanager
def running_operator(
    binary: Path, kubeconfig: Path, workdir: Path, namespaces: Iterable[str]
) -> Iterator[PrometheusOperator]:
    """The operator against the API server of ``kubeconfig`` (its CRDs applied first), until
    the block ends; its output in ``workdir/prometheus-operator.log``."""
    workdir.mkdir(parents=True, exist_ok=True)
    listen = f"127.0.0.1:{free_port()}"
    log = workdir / "prometheus-operator.log"
    with log.open("wb") as sink:
        popen = subprocess.Popen(
            operator_argv(binary, namespaces, listen),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            # The operator reads KUBECONFIG itself (it has no --kubeconfig flag).
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads run at spawn time
        )
    operator = PrometheusOperator(popen, log, f"http://{listen}")
    try:

        def healthy() -> bool:
            if not operator.alive():
                raise PrometheusOperatorError(
                    f"prometheus-operator exited with {popen.returncode}:\n{operator.tail()}"
                )
            return _answers(f"{operator.url}/healthz")

        _until(healthy, START_WITHIN, "prometheus-operator healthy")
        yield operator
    finally:
        operator.stop()


def generated_alertmanager_config(
    rest: Rest,
    namespace: str,
    name: str,
    *,
    until: Callable[[str], bool] = bool,
    within: float = GENERATED_WITHIN,
) -> str:
    """The configuration the operator generated for Alertmanager ``name`` (the Secret
    ``alertmanager-<name>-generated``, ``alertmanager.yaml.gz``), once ``until`` holds for it:
    the operator writes it again whenever a selected object changes, so a caller waits for the
    version that shows what it is looking for."""
    return _poll_text(
        lambda: _gunzipped_secret(
            rest, namespace, f"alertmanager-{name}-generated", "alertmanager.yaml.gz"
        ),
        until,
        within,
        f"Alertmanager {namespace}/{name}'s generated configuration",
    )


def generated_prometheus_config(
    rest: Rest,
    namespace: str,
    name: str,
    *,
    until: Callable[[str], bool] = bool,
    within: float = GENERATED_WITHIN,
) -> str:
    """The configuration the operator generated for Prometheus ``name`` (the Secret
    ``prometheus-<name>``, ``prometheus.yaml.gz``: its scrape jobs), once ``until`` holds."""
    return _poll_text(
        lambda: _gunzipped_secret(rest, namespace, f"prometheus-{name}", "prometheus.yaml.gz"),
        until,
        within,
        f"Prometheus {namespace}/{name}'s generated configuration",
    )


def generated_rule_files(
    rest: Rest,
    namespace: str,
    name: str,
    *,
    until: Callable[[dict[str, str]], bool] = bool,
    within: float = GENERATED_WITHIN,
) -> dict[str, str]:
    """The rule files the operator generated for Prometheus ``name`` from the PrometheusRules it
    selected (the ConfigMap ``prometheus-<name>-rulefiles-0``: one file per PrometheusRule,
    named ``<namespace>-<name>-<uid>.yaml``), once ``until`` holds for them."""
    last: dict[str, str] = {}

    def read() -> bool:
        nonlocal last
        try:
            found = rest.get(
                f"/api/v1/namespaces/{namespace}/configmaps/prometheus-{name}-rulefiles-0"
            )
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        last = {str(k): str(v) for k, v in (found.get("data") or {}).items()}
        return until(last)

    _until(read, within, f"Prometheus {namespace}/{name}'s rule files", lambda: last)
    return last


def _gunzipped_secret(rest: Rest, namespace: str, name: str, key: str) -> str | None:
    try:
        secret = rest.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise
    data = (secret.get("data") or {}).get(key)
    if data is None:
        return None
    return gzip.decompress(base64.b64decode(data)).decode()


def _poll_text(
    read: Callable[[], str | None], until: Callable[[str], bool], within: float, what: str
) -> str:
    last: str | None = None

    def probe() -> bool:
        nonlocal last
        last = read()
        return last is not None and until(last)

    _until(probe, within, what, lambda: last)
    assert last is not None
    return last


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback http
            return int(response.status) == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _until(
    probe: Callable[[], bool],
    within: float,
    what: str,
    seen: Callable[[], Any] = lambda: None,
) -> None:
    deadline = time.monotonic() + within
    while not probe():
        if time.monotonic() > deadline:
            raise PrometheusOperatorError(
                f"{what}: not within {within:.0f}s (last seen: {seen()!r})"
            )
        time.sleep(0.5)
