"""The policy: which alerts nodefence acts on, which nodes, and how carefully.

Every setting has a default that is safe on its own, so running without a policy file fences
only nodes that are verifiably dead and never more than one at a time. Unknown keys are errors:
a misspelt safety setting that silently fell back to its default would be worse than a refusal
to start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nodefence import strict_yaml
from nodefence.engine import drivers
from nodefence.engine.labels import SelectorError, parse_selector

DEFAULT_ALERT_NAMES = ("KubeNodeNotReady", "KubeNodeUnreachable", "NodefenceNodeNotReady")


class PolicyError(Exception):
    """The policy file cannot be read or does not validate; the message names file and field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlertsPolicy(_Model):
    names: list[str] = Field(default_factory=lambda: list(DEFAULT_ALERT_NAMES), min_length=1)
    # Alert labels that may carry the node name, tried in order. ``instance`` has its port
    # stripped, since node-exporter targets look like ``node1:9100``.
    node_labels: list[str] = Field(default_factory=lambda: ["node"], min_length=1)


class PurgePolicy(_Model):
    terminating: bool = True
    non_terminating: bool = False
    # ``None`` stands for bare pods without an owner reference.
    owner_kinds: list[str] = Field(
        default_factory=lambda: ["StatefulSet", "ReplicaSet", "DaemonSet", "Job", "None"]
    )
    namespaces: list[str] = Field(default_factory=list)
    exclude_namespaces: list[str] = Field(default_factory=list)
    only_with_pvc: bool = False
    strip_finalizers: list[str] = Field(default_factory=list)


class RuleMatch(_Model):
    # Empty: every alert name listed under ``alerts.names``.
    alertnames: list[str] = Field(default_factory=list)
    alert_labels: dict[str, str] = Field(default_factory=dict)
    node_selector: str = ""

    @field_validator("node_selector")
    @classmethod
    def _valid_selector(cls, value: str) -> str:
        try:
            parse_selector(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from exc
        return value


class Fencing(_Model):
    """How a rule proves that the machine behind a node is off before the taint (S10).

    ``redfish`` and ``ipmi`` ask the node's BMC (from the BMC inventory): ``verify`` only reads
    its power state, ``off`` powers it off first and reads it back until it reports Off,
    ``reboot`` does the same and powers it on again after the purge. ``fence-agent`` does the
    same through the node's ClusterLabs fence agent, whose proof is only a separate ``status``
    run exiting 2 (and ``reboot`` is never the agent's own reboot). ``annotation``: external
    fencing writes ``annotation`` = "off" (or "true") on the ConfigMap ``nodefence-power.<node>``
    in nodefence's namespace, after the machine went off; never on the Node, whose own
    credentials could write it (S12). ``http``: GET ``url``
    (``{node}`` replaced by the node name) must answer "off" within ``timeout_seconds``.
    ``none`` is the explicit choice to fence on inference alone (NotReady, a Lease silent on the
    API server's clock), and every decision made so says "no proof". No answer, no fence.
    """

    # A name in the driver registry (``nodefence.engine.drivers``), checked against it.
    driver: str
    action: Literal["verify", "off", "reboot"] = "off"
    # How long a power action may take to be read back (Off after off, On after on).
    timeout_seconds: float = Field(default=15.0, gt=0, le=600)
    annotation: str = "nodefence.io/power-state"
    url: str = ""
    # When the power step genuinely fails (driver error, timeout, a state that is not Off):
    # ``refuse`` (no proof, no taint) or ``approval`` (ask a person in Slack, whose approval
    # then stands in for the proof; nodefence.engine.escalation). A machine shown to be another
    # node's, or a target two nodes share, is a configuration error and is never escalated.
    on_failure: Literal["refuse", "approval"] = "refuse"

    @field_validator("driver")
    @classmethod
    def _known_driver(cls, value: str) -> str:
        return drivers.lookup(value).name

    @field_validator("action", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        """YAML 1.1 reads a bare ``off`` as false; ``action: off`` means the action off."""
        return "off" if value is False else value

    @model_validator(mode="after")
    def _consistent(self) -> Fencing:
        if self.driver == "http" and "://" not in self.url:
            raise ValueError("url is required (http or https) when driver is http")
        powering = " or ".join(drivers.power_drivers())
        if not self.powers and self.action != "off":
            raise ValueError(
                f"action {self.action} needs a BMC (driver {powering}); driver "
                f"{self.driver} only reads proof"
            )
        if self.on_failure == "approval" and not self.powers:
            raise ValueError(
                f"on_failure approval escalates a failed power step, which only driver "
                f"{powering} has; driver {self.driver} has none to escalate"
            )
        return self

    @property
    def powers(self) -> bool:
        return drivers.lookup(self.driver).powers

    @property
    def proof(self) -> drivers.Proof:
        return drivers.lookup(self.driver).proof


def _legacy_proof(rule: dict[str, Any]) -> dict[str, Any]:
    """``power_off_proof`` (mode annotation | http) keeps working as the matching ``fencing``;
    its mode ``none`` meant acting on inference alone, which is now an explicit choice."""
    proof = rule.pop("power_off_proof")
    if not isinstance(proof, dict):
        raise TypeError("power_off_proof is replaced by fencing (see fencing.driver)")
    if "fencing" in rule:
        raise ValueError("power_off_proof is replaced by fencing; set only fencing")
    mode = proof.get("mode", "none")
    if mode == "none":
        raise ValueError(
            "power_off_proof mode none is replaced by fencing.driver: none (an explicit choice "
            "to fence on inference alone) or a real driver (redfish, ipmi, fence-agent, "
            "annotation, http)"
        )
    converted: dict[str, Any] = {"driver": mode}
    for key in ("annotation", "url", "timeout_seconds"):
        if key in proof:
            converted[key] = proof[key]
    rule["fencing"] = converted
    return rule


class Rule(_Model):
    name: str = Field(default="default", min_length=1)
    match: RuleMatch = Field(default_factory=RuleMatch)
    min_not_ready_seconds: int = Field(default=300, ge=0)
    # A node whose machine its BMC reads Off (read-only, and shown to be this node's machine)
    # has nothing left to wait for: the NotReady minimum and the fallback's wait for an alert do
    # not apply to it (``engine.power_waits``). Off: those waits apply whatever the machine says.
    power_off_ends_wait: bool = True
    # The node-lifecycle controller's grace (Kubernetes' default --node-monitor-grace-period,
    # 50 s since 1.32; 40 s before): a Lease silent this long is one Kubernetes calls dead too,
    # five of the kubelet's 10 s renewals missed. Never shorter than the cluster's grace.
    lease_staleness_seconds: int = Field(default=50, gt=0)
    # A node without a kubelet Lease gives no second opinion on its liveness, so by default it
    # is not fenced. Clusters whose kubelets predate node leases can opt in here.
    fence_without_lease: bool = False
    healthy_delay_seconds: int = Field(default=300, ge=0)
    require_new_boot_id: bool = False
    taint_effect: Literal["NoExecute", "NoSchedule"] = "NoExecute"
    purge: PurgePolicy = Field(default_factory=PurgePolicy)
    volume_attachment_cleanup: bool = False
    approval: Literal["none", "slack"] = "none"
    # An approval older than this no longer authorises a fence; the request is asked again.
    approval_timeout_seconds: int = Field(default=3600, gt=0)
    flap_window_seconds: int = Field(default=1800, ge=0)
    # None: no proof is configured, so this rule fences only with a person's approval (S10).
    fencing: Fencing | None = None

    @model_validator(mode="before")
    @classmethod
    def _former_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "power_off_proof" in data:
            return _legacy_proof(dict(data))
        return data

    @property
    def needs_new_boot_id(self) -> bool:
        """A reboot through the BMC is verified by the bootID it must produce."""
        return self.require_new_boot_id or (
            self.fencing is not None and self.fencing.action == "reboot"
        )


# The most nodes the fence budget may hold at once: the fence record, one object every fence
# writes, is sized for this many fences with every field at its cap (``engine.caps``) and stays
# far below the API server's 1 MiB per object.
MAX_FENCED_NODES = 32


class ClusterPolicy(_Model):
    max_fenced_nodes: int = Field(default=1, ge=0, le=MAX_FENCED_NODES)
    min_ready_fraction: float = Field(default=0.51, ge=0.0, le=1.0)
    control_plane_quorum: bool = True
    storm_not_ready_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    # After a storm ends, nodes that recovered within this window still count as part of it.
    storm_cooldown_seconds: int = Field(default=600, ge=0)
    # A claimed fence record entry whose taint never came is rolled back once it is older than
    # this, on the API server's clock. It must outlast the slowest fence (request deadline plus
    # any power-off wait), or a slow fence could lose its slot while still at work.
    claim_timeout_seconds: int = Field(default=300, ge=30)
    # A NotReady node that no alert brought to nodefence for this long, and that Alertmanager
    # (where it can be asked) holds no alert for, is judged as if its alert had fired
    # (``engine.fallback``); 0 turns this off. The rule's NotReady minimum (5 minutes) by
    # default: a hung machine waits the same with or without an alert, and one whose BMC reads
    # Off waits for neither (``engine.power_waits``).
    fallback_after_seconds: int = Field(default=300, ge=0)


class Policy(_Model):
    dry_run: bool = False
    paused: bool = False
    alerts: AlertsPolicy = Field(default_factory=AlertsPolicy)
    rules: list[Rule] = Field(default_factory=lambda: [Rule()])
    cluster: ClusterPolicy = Field(default_factory=ClusterPolicy)

    @field_validator("rules")
    @classmethod
    def _rules(cls, value: list[Rule]) -> list[Rule]:
        if not value:
            return [Rule()]
        names = [rule.name for rule in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            # The fence record names the rule that fenced a node, so names must identify a rule.
            raise ValueError(f"rule names must be unique; repeated: {', '.join(duplicates)}")
        return value

    def rule_named(self, name: str | None) -> Rule | None:
        return next((rule for rule in self.rules if rule.name == name), None)


def claim_outlasts_power_steps(policy: Policy, request_deadline_seconds: float) -> list[str]:
    """Rules whose power step can take longer than a claim lives. A claim older than
    ``claim_timeout_seconds`` is rolled back and another replica may fence afresh (power off,
    taint, purge, power on); a power step still waiting on its BMC could then send its power-off
    to the machine just powered on again. So a claim must outlast its slowest power step: the
    rule's ``fencing.timeout_seconds`` on top of the request's deadline."""
    problems: list[str] = []
    claim = policy.cluster.claim_timeout_seconds
    for rule in policy.rules:
        fencing = rule.fencing
        # ``verify`` only reads: a late answer sends nothing.
        if fencing is None or not fencing.powers or fencing.action == "verify":
            continue
        needed = fencing.timeout_seconds + request_deadline_seconds
        if claim < needed:
            problems.append(
                f"cluster.claim_timeout_seconds ({claim}) is shorter than rule {rule.name!r}'s "
                f"power step can take (fencing.timeout_seconds {fencing.timeout_seconds:g} + the "
                f"request deadline {request_deadline_seconds:g}s = {needed:g}s): a claim rolled "
                "back while its power step still waits on the BMC would let that step power off "
                f"a machine another replica fenced and powered on again; set it to at least "
                f"{int(needed) + 1}"
            )
    return problems


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"{_field_path(err['loc'])}: {err['msg']}" for err in exc.errors()]
    return f"invalid policy {source}: " + "; ".join(lines)


def parse_policy(data: Any, source: str = "<policy>") -> Policy:
    """Validate already-parsed YAML; an empty document means all defaults."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"invalid policy {source}: the top level must be a mapping")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(_format_errors(exc, source)) from None


def load_policy(path: str | Path | None) -> Policy:
    """Load the policy file, or the defaults when no path is given.

    A path that is given but missing is an error rather than the defaults: a typo in the
    configured path must not quietly drop the operator's stricter settings.
    """
    if path is None or str(path) == "":
        return Policy()
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read policy {file}: {exc.strerror or exc}") from None
    try:
        data = strict_yaml.load(text)
    except strict_yaml.DuplicateKeyError as exc:
        raise PolicyError(f"invalid policy {file}: {exc}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"invalid policy {file}: not valid YAML: {exc}") from None
    return parse_policy(data, str(file))
