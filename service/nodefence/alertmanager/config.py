"""Where Alertmanager is and how to authenticate to it.

Kept apart from the client so that settings can validate it without importing aiohttp, and so
that a mistake (a token and a password at once, credentials inside the URL, ``insecure`` with a
CA bundle) is refused when the settings load rather than on the first reconcile pass.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from nodefence.engine.matchers import Matcher, MatcherError, equalities, parse

MASK = "********"
# Shown by ``check-config`` when no URL is set, so the operator learns what that costs.
UNCONFIGURED = (
    "Alertmanager: not configured (NODEFENCE_ALERTMANAGER_URL unset); the reconcile pass does "
    "not re-evaluate active node alerts, so a refused fence is retried only when Alertmanager "
    "repeats the notification (repeat_interval)"
)


class AlertmanagerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Base URL of Alertmanager, with any path prefix it is served under (``--web.route-prefix``
    # or a proxy); ``/api/v2/alerts`` is appended to it.
    url: str
    bearer_token: SecretStr | None = None
    basic_user: str | None = None
    basic_password: SecretStr | None = None
    ca_file: Path | None = None
    insecure: bool = False
    timeout: float = Field(default=10.0, gt=0)
    # Node alerts are filtered on the server, so even a large outage stays far below this;
    # the bound protects the reconcile pass from a misdirected URL streaming without end.
    max_response_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    # The matchers that identify this cluster's alerts (``engine.matchers`` syntax), empty when
    # Alertmanager serves this cluster alone.
    matchers: str = ""

    @field_validator("matchers")
    @classmethod
    def _readable_matchers(cls, value: str) -> str:
        try:
            parse(value)
        except MatcherError as exc:
            raise ValueError(f"is not a list of Alertmanager matchers: {exc}") from None
        return value.strip()

    @property
    def cluster_matchers(self) -> tuple[Matcher, ...]:
        return parse(self.matchers)

    @property
    def cluster_labels(self) -> dict[str, str]:
        """The labels every alert of this cluster carries for certain (its ``=`` matchers)."""
        return equalities(self.cluster_matchers)

    @field_validator("url")
    @classmethod
    def _plain_http_url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            # A password inside the URL would be printed wherever the URL is.
            raise ValueError(
                "must not contain credentials; use NODEFENCE_ALERTMANAGER_USER and "
                "NODEFENCE_ALERTMANAGER_PASSWORD (or NODEFENCE_ALERTMANAGER_TOKEN)"
            )
        if parts.query or parts.fragment:
            raise ValueError("must not have a query or fragment")
        return parts.geturl().rstrip("/")

    @model_validator(mode="after")
    def _consistent(self) -> AlertmanagerConfig:
        if (self.basic_user is None) != (self.basic_password is None):
            raise ValueError(
                "NODEFENCE_ALERTMANAGER_USER and NODEFENCE_ALERTMANAGER_PASSWORD must be set "
                "together"
            )
        if self.bearer_token is not None and self.basic_user is not None:
            raise ValueError(
                "set either NODEFENCE_ALERTMANAGER_TOKEN or NODEFENCE_ALERTMANAGER_USER and "
                "NODEFENCE_ALERTMANAGER_PASSWORD, not both"
            )
        if self.insecure and self.ca_file is not None:
            raise ValueError(
                "NODEFENCE_ALERTMANAGER_INSECURE turns certificate checks off, so "
                "NODEFENCE_ALERTMANAGER_CA_FILE would be ignored; set only one"
            )
        return self

    @property
    def alerts_url(self) -> str:
        return f"{self.url}/api/v2/alerts"

    @property
    def silences_url(self) -> str:
        return f"{self.url}/api/v2/silences"

    def secrets(self) -> tuple[str, ...]:
        """Every credential's plain value, so messages can be scrubbed of them."""
        values = (self.bearer_token, self.basic_password)
        return tuple(v.get_secret_value() for v in values if v is not None and v.get_secret_value())

    def describe(self) -> str:
        """One line for ``check-config``: where, how authenticated, how TLS is checked."""
        if self.bearer_token is not None:
            auth = f"bearer token {MASK}"
        elif self.basic_user is not None:
            auth = f"basic auth as {self.basic_user} (password {MASK})"
        else:
            auth = "no authentication"
        if not self.url.startswith("https://"):
            tls = "plain HTTP"
        elif self.insecure:
            tls = "TLS without certificate verification (insecure)"
        elif self.ca_file is not None:
            tls = f"TLS verified against {self.ca_file}"
        else:
            tls = "TLS verified against the system CAs"
        scope = (
            f"this cluster's alerts are those matching {{{self.matchers}}}"
            if self.matchers
            else "every alert it holds is taken as this cluster's (NODEFENCE_ALERTMANAGER_MATCHERS "
            "unset)"
        )
        return (
            f"Alertmanager: {self.url}, {auth}, {tls}, timeout {self.timeout:g}s; {scope}; the "
            "reconcile pass re-evaluates the node alerts it holds active, and its silences hold "
            "the fallback"
        )
