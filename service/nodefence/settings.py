"""Process settings, read from ``NODEFENCE_*`` environment variables.

Authentication is on unless explicitly disabled: starting without any credential is refused
with an error that names the variable to set, so a misconfigured Deployment fails loudly at
start rather than silently accepting anyone's webhook.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from nodefence.alertmanager.config import AlertmanagerConfig
from nodefence.errors import ConfigError
from nodefence.http.tls import TlsPairError, load_pair
from nodefence.http.tokens import TokenFileError, read_token_file, split_tokens

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
MASK = "********"


def _default_namespace() -> str:
    try:
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
    except OSError:
        return "nodefence"
    return namespace or "nodefence"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="NODEFENCE_",
        extra="ignore",
        populate_by_name=True,
        validate_default=True,
    )

    # One token, or several separated by commas (all accepted, for rotation).
    alert_token: SecretStr | None = None
    # A file mounted from a Secret holding one or more tokens (comma- or newline-separated),
    # re-read whenever it changes, so a rotation needs no restart.
    alert_token_file: Path | None = None
    # Seconds between the reconcile passes each serving receiver runs on its own (jittered);
    # 0 turns them off (a receiver that scales to zero relies on the reconcile CronJob).
    reconcile_interval: float = Field(default=60, ge=0, le=3600)
    # Seconds between the read-only probes of every inventory node's power state (jittered);
    # 0 turns them off. A probe reads status only, never sends a power action.
    fencing_probe_interval: float = Field(default=900, ge=0, le=86400)
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    auth_disabled: bool = False

    policy_file: Path | None = None
    # The BMC inventory (node name -> BMC address, system, credentials, TLS), mounted from a
    # Secret; read by rules whose fencing.driver is redfish or ipmi.
    bmc_inventory: Path | None = None
    dry_run: bool = False

    # Knative and most PaaS runtimes set a bare PORT, so that name wins over the prefixed one.
    port: int = Field(
        default=8080, ge=0, le=65535, validation_alias=AliasChoices("PORT", "NODEFENCE_PORT")
    )
    host: str = "0.0.0.0"
    # The webhook over TLS: a certificate chain and its private key (PEM), mounted from a
    # Secret (cert-manager's tls.crt and tls.key) and re-read when they change, so a renewal
    # needs no restart. Unset: plain HTTP.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Read limits on every connection, as production HTTP servers have, so a client that opens
    # connections and drips bytes (slowloris) cannot hold them open: the request line and
    # headers (and, with TLS, the handshake) must arrive within header_timeout_seconds of the
    # connection or of the request's first byte, the body within body_timeout_seconds of the
    # headers, and a kept-alive connection may wait idle idle_timeout_seconds for its next
    # request. Alertmanager sends a whole webhook at once, in milliseconds.
    header_timeout_seconds: float = Field(default=10, gt=0, le=600)
    body_timeout_seconds: float = Field(default=30, gt=0, le=3600)
    idle_timeout_seconds: float = Field(default=75, gt=0, le=3600)
    max_body_bytes: int = Field(default=1048576, gt=0)
    log_format: Literal["json", "console"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    request_deadline_seconds: float = Field(default=20, gt=0)
    # The process's own limit on the Kubernetes API (``kube.ratelimit``), as every client-go
    # controller has one: 20 requests a second with bursts of 30 are kube-controller-manager's
    # settings, which an operator already accepts from a core controller (client-go's library
    # default is 5/10, kube-scheduler's 50/100); with them no second ever carries more than 50
    # requests from one replica. Refusals are served from the watch-fed cache and shared reads,
    # so a storm of hundreds of alerts stays within them. 0 turns the limit off.
    api_qps: float = Field(default=20, ge=0)
    api_burst: int = Field(default=30, ge=1)
    # The writes of a fence in progress (claim, taint, purge, record writes) go first, and may
    # also draw on this allowance when the shared bucket is empty: they are bounded by the fence
    # budget, not by the number of alerts, and a node with hundreds of stuck pods is purged in
    # about a second, as without the limit.
    api_fence_qps: float = Field(default=500, ge=0)
    api_fence_burst: int = Field(default=500, ge=0)
    # Refuse from the cache, act on live reads: a firing alert is first decided on the watch-fed
    # node index and a shared fence record read, and that decision stands only as a refusal
    # (``shell.cached_refusal``). Off: every alert reads the node, Lease, pods and record live.
    cached_refusals: bool = True

    namespace: str = Field(default_factory=_default_namespace)
    # The kubeconfig context (``--context``); unset: the kubeconfig's current-context. Read by
    # the cluster loader (``kube.access``) from the environment, as KUBECONFIG is.
    context: str | None = None
    identity: str = Field(default_factory=socket.gethostname)
    # The node this replica runs on (the downward API's spec.nodeName, as the shipped Deployment
    # sets it): a fence of that node is left to another replica, since this one's power-off
    # would stop it halfway and leave its claim to time out. Unset: runs on no node of the cluster.
    node_name: str | None = None

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    approval_key: SecretStr | None = None
    slack_channel: str | None = None
    slack_approvers: Annotated[list[str], NoDecode] = Field(default_factory=list)
    slack_api_url: str | None = None
    approval_ttl_seconds: int = Field(default=3600, gt=0)
    # Slack user group IDs (S...) whose members may approve, besides ``slack_approvers``.
    slack_approver_groups: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Post a notice to ``slack_channel`` when nodefence fences or unfences, with or without
    # approval mode.
    slack_notify: bool = False
    slack_timeout_seconds: float = Field(default=5, gt=0)

    # Alertmanager's API v2, asked by the reconcile pass for the node alerts still firing.
    alertmanager_url: str | None = None
    alertmanager_token: SecretStr | None = None
    alertmanager_user: str | None = None
    alertmanager_password: SecretStr | None = None
    alertmanager_ca_file: Path | None = None
    alertmanager_insecure: bool = False
    alertmanager_timeout_seconds: float = Field(default=10, gt=0)
    # Alertmanager matchers that identify this cluster's alerts on an Alertmanager several
    # clusters share (``cluster="prod-a"``): every query of alerts and silences is narrowed by
    # them, so another cluster's alert never fences a node of this one.
    alertmanager_matchers: str = ""

    @field_validator(
        "alert_token",
        "alert_token_file",
        "basic_auth_user",
        "basic_auth_password",
        "slack_bot_token",
        "slack_signing_secret",
        "approval_key",
        "slack_channel",
        "slack_api_url",
        "alertmanager_url",
        "alertmanager_token",
        "alertmanager_user",
        "alertmanager_password",
        "alertmanager_ca_file",
        "tls_cert_file",
        "tls_key_file",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # Kubernetes renders an optional Secret key that is absent as an empty variable.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("slack_approvers", "slack_approver_groups", mode="before")
    @classmethod
    def _split_approvers(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [item.strip() for item in text.split(",") if item.strip()]
        return value

    @field_validator("alert_token")
    @classmethod
    def _some_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not split_tokens(value.get_secret_value()):
            raise ValueError("NODEFENCE_ALERT_TOKEN holds only separators, no token")
        return value

    @model_validator(mode="after")
    def _readable_token_file(self) -> Settings:
        # Read once here so that a missing or empty file fails at start, naming the file.
        if self.alert_token_file is not None and not self.auth_disabled:
            try:
                read_token_file(self.alert_token_file)
            except TokenFileError as exc:
                raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _loadable_tls_pair(self) -> Settings:
        # Loaded once here so that a missing file or a key that does not match its certificate
        # fails at start (and in check-config), naming the files, never their content.
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError(
                "NODEFENCE_TLS_CERT_FILE and NODEFENCE_TLS_KEY_FILE must be set together"
            )
        if self.tls_cert_file is not None and self.tls_key_file is not None:
            try:
                load_pair(self.tls_cert_file, self.tls_key_file)
            except TlsPairError as exc:
                raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _require_credentials(self) -> Settings:
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            raise ValueError(
                "NODEFENCE_BASIC_AUTH_USER and NODEFENCE_BASIC_AUTH_PASSWORD must be set together"
            )
        if not self.auth_disabled and not self.has_credentials:
            raise ValueError(
                "no credential for /alerts and /reconcile: set NODEFENCE_ALERT_TOKEN or "
                "NODEFENCE_ALERT_TOKEN_FILE (or "
                "NODEFENCE_BASIC_AUTH_USER and NODEFENCE_BASIC_AUTH_PASSWORD), or set "
                "NODEFENCE_AUTH_DISABLED=true to accept unauthenticated requests"
            )
        return self

    @model_validator(mode="after")
    def _valid_alertmanager(self) -> Settings:
        # Built once here so that a bad combination fails at start, not on a reconcile pass.
        try:
            _ = self.alertmanager
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            message = first["msg"].removeprefix("Value error, ")
            if first["loc"]:
                message = f"alertmanager_{first['loc'][0]}: {message}"
            raise ValueError(message) from None
        return self

    @property
    def alertmanager(self) -> AlertmanagerConfig | None:
        """The reconcile pass's Alertmanager, or None when no URL is set (no active-alert
        re-evaluation)."""
        if self.alertmanager_url is None:
            return None
        return AlertmanagerConfig(
            url=self.alertmanager_url,
            bearer_token=self.alertmanager_token,
            basic_user=self.alertmanager_user,
            basic_password=self.alertmanager_password,
            ca_file=self.alertmanager_ca_file,
            insecure=self.alertmanager_insecure,
            timeout=self.alertmanager_timeout_seconds,
            matchers=self.alertmanager_matchers,
        )

    @property
    def has_credentials(self) -> bool:
        basic = self.basic_auth_user is not None and self.basic_auth_password is not None
        return self.alert_token is not None or self.alert_token_file is not None or basic

    @property
    def alert_tokens(self) -> list[SecretStr]:
        """The tokens of ``NODEFENCE_ALERT_TOKEN`` (the file's are read by ``TokenSource``)."""
        if self.alert_token is None:
            return []
        return [SecretStr(t) for t in split_tokens(self.alert_token.get_secret_value())]

    def masked(self) -> dict[str, Any]:
        """The effective settings for ``check-config``, safe to print and paste into a ticket."""
        shown: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                shown[name] = MASK
            elif isinstance(value, Path):
                shown[name] = str(value)
            elif isinstance(value, list):
                shown[name] = list(value)
            else:
                shown[name] = value
        return shown


def environment_names() -> list[str]:
    """Each setting's environment variable, as the model reads it (``--help`` lists them)."""
    prefix = Settings.model_config.get("env_prefix", "")
    names = []
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.append(str(alias.choices[0]))
        else:
            names.append(f"{prefix}{name}".upper())
    return names


def load_settings(**overrides: Any) -> Settings:
    """Read the environment, turning validation failures into one readable ``ConfigError``."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            location = ".".join(str(part) for part in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{location}: {message}" if location else message)
        raise ConfigError("invalid settings: " + "; ".join(problems)) from None
