"""Settings from the environment, their validation and masking; log redaction."""

from __future__ import annotations

import io
import json
import logging
import os

import pytest
import structlog
from pydantic import SecretStr, ValidationError

from nodefence.errors import ConfigError
from nodefence.observability.logging import configure_logging
from nodefence.settings import MASK, Settings, load_settings

SECRET_ENV = {
    "NODEFENCE_ALERT_TOKEN": "tok-1a2b3c",
    "NODEFENCE_BASIC_AUTH_USER": "am",
    "NODEFENCE_BASIC_AUTH_PASSWORD": "pw-4d5e6f",
    "NODEFENCE_SLACK_BOT_TOKEN": "xoxb-7g8h9i",
    "NODEFENCE_SLACK_SIGNING_SECRET": "sign-0j1k2l",
    "NODEFENCE_APPROVAL_KEY": "key-3m4n5o",
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("NODEFENCE_") or name == "PORT":
            monkeypatch.delenv(name)


def test_no_credentials_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="NODEFENCE_ALERT_TOKEN"):
        load_settings()
    with pytest.raises(ValidationError, match="NODEFENCE_AUTH_DISABLED"):
        Settings()


def test_empty_token_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEFENCE_ALERT_TOKEN", "  ")
    with pytest.raises(ConfigError, match="NODEFENCE_ALERT_TOKEN"):
        load_settings()


def test_basic_user_without_password_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEFENCE_BASIC_AUTH_USER", "am")
    with pytest.raises(ConfigError, match="must be set together"):
        load_settings()


def test_explicit_opt_out_needs_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEFENCE_AUTH_DISABLED", "true")
    assert load_settings().auth_disabled is True


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PORT", "9191")
    monkeypatch.setenv("NODEFENCE_DRY_RUN", "true")
    monkeypatch.setenv("NODEFENCE_POLICY_FILE", "/etc/nodefence/policy.yaml")
    monkeypatch.setenv("NODEFENCE_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("NODEFENCE_SLACK_APPROVERS", "U123, U456")
    monkeypatch.setenv("NODEFENCE_NAMESPACE", "ops")
    monkeypatch.setenv("NODEFENCE_IDENTITY", "replica-a")

    settings = load_settings()

    assert settings.port == 9191
    assert settings.dry_run is True
    assert str(settings.policy_file) == "/etc/nodefence/policy.yaml"
    assert settings.log_level == "debug"
    assert settings.slack_approvers == ["U123", "U456"]
    assert settings.namespace == "ops"
    assert settings.identity == "replica-a"
    assert settings.alert_token == SecretStr("tok-1a2b3c")


def test_port_defaults_to_8080_and_approvers_accept_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEFENCE_ALERT_TOKEN", "t")
    monkeypatch.setenv("NODEFENCE_SLACK_APPROVERS", '["U1","U2"]')
    settings = load_settings()
    assert settings.port == 8080
    assert settings.host == "0.0.0.0"
    assert settings.max_body_bytes == 1048576
    assert settings.slack_approvers == ["U1", "U2"]


def test_invalid_port_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEFENCE_ALERT_TOKEN", "t")
    monkeypatch.setenv("PORT", "70000")
    with pytest.raises(ConfigError, match="PORT"):
        load_settings()


def test_masked_never_shows_secret_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    shown = load_settings().masked()
    rendered = json.dumps(shown)

    for value in SECRET_ENV.values():
        if value != "am":
            assert value not in rendered
    assert shown["alert_token"] == MASK
    assert shown["slack_signing_secret"] == MASK
    assert shown["basic_auth_user"] == "am"
    assert shown["slack_channel"] is None
    assert shown["port"] == 8080


def test_log_redaction_masks_secret_values_and_keys() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    structlog.get_logger().info(
        "config",
        alert_token="plain-abc",
        headers={"Authorization": "Bearer plain-def", "Accept": "x"},
        value=SecretStr("plain-ghi"),
        nested=[{"password": "plain-jkl"}],
        node="worker-1",
    )
    line = json.loads(stream.getvalue())
    assert "plain-" not in stream.getvalue()
    assert line["alert_token"] == MASK
    assert line["headers"] == {"Authorization": MASK, "Accept": "x"}
    assert line["value"] == MASK
    assert line["node"] == "worker-1"
    assert line["level"] == "info"
    assert line["timestamp"].endswith("Z")


def test_console_format_and_level_filter() -> None:
    stream = io.StringIO()
    configure_logging("console", "warning", stream=stream)
    log = structlog.get_logger()
    log.info("hidden")
    log.warning("shown", token="plain-xyz")
    output = stream.getvalue()
    assert "hidden" not in output
    assert "shown" in output
    assert "plain-xyz" not in output


def test_stdlib_records_share_the_redacting_chain() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    logging.getLogger("aiohttp.server").error("boom %s", "here")
    line = json.loads(stream.getvalue())
    assert line["event"] == "boom here"
    assert line["level"] == "error"
