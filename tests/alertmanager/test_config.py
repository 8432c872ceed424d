"""NODEFENCE_ALERTMANAGER_* settings: what they build, what they refuse, what is shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodefence.alertmanager.config import UNCONFIGURED, AlertmanagerConfig
from nodefence.errors import ConfigError
from nodefence.settings import load_settings

TOKEN = "tok-3f9a-never-shown"
PASSWORD = "pw-81c2-never-shown"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("URL", "TOKEN", "USER", "PASSWORD", "CA_FILE", "INSECURE", "TIMEOUT_SECONDS"):
        monkeypatch.delenv(f"NODEFENCE_ALERTMANAGER_{name}", raising=False)
    monkeypatch.setenv("NODEFENCE_AUTH_DISABLED", "true")


def test_without_a_url_there_is_no_alertmanager(monkeypatch: pytest.MonkeyPatch) -> None:
    # Kubernetes renders an optional Secret key that is absent as an empty variable.
    monkeypatch.setenv("NODEFENCE_ALERTMANAGER_URL", "")
    monkeypatch.setenv("NODEFENCE_ALERTMANAGER_TOKEN", "")
    assert load_settings().alertmanager is None
    assert "NODEFENCE_ALERTMANAGER_URL" in UNCONFIGURED


def test_environment_builds_the_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    monkeypatch.setenv("NODEFENCE_ALERTMANAGER_URL", "https://am.monitoring.svc:9093/am/")
    monkeypatch.setenv("NODEFENCE_ALERTMANAGER_USER", "reader")
    monkeypatch.setenv("NODEFENCE_ALERTMANAGER_PASSWORD", PASSWORD)
    monkeypatch.setenv("NODEFENCE_ALERTMANAGER_CA_FILE", str(ca))
    monkeypatch.setenv("NODEFENCE_ALERTMANAGER_TIMEOUT_SECONDS", "3")
    settings = load_settings()
    config = settings.alertmanager
    assert config is not None
    assert config.alerts_url == "https://am.monitoring.svc:9093/am/api/v2/alerts"
    assert config.basic_user == "reader"
    assert config.basic_password is not None
    assert config.basic_password.get_secret_value() == PASSWORD
    assert config.ca_file == ca
    assert config.timeout == 3
    assert not config.insecure
    text = config.describe()
    assert "basic auth as reader" in text
    assert f"TLS verified against {ca}" in text
    assert PASSWORD not in text
    assert PASSWORD not in str(settings.masked())


def test_describe_names_the_tls_mode_and_masks_the_token() -> None:
    plain = AlertmanagerConfig(url="http://am:9093", bearer_token=TOKEN).describe()
    assert "bearer token ********" in plain
    assert "plain HTTP" in plain
    assert TOKEN not in plain
    insecure = AlertmanagerConfig(url="https://am:9093", insecure=True).describe()
    assert "without certificate verification" in insecure
    assert "no authentication" in insecure
    assert "system CAs" in AlertmanagerConfig(url="https://am:9093").describe()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"URL": "am:9093"}, "alertmanager_url: must be an http:// or https:// URL"),
        ({"URL": "http://u:p@am:9093"}, "must not contain credentials"),
        ({"URL": "http://am:9093/?x=1"}, "must not have a query"),
        ({"URL": "http://am", "USER": "reader"}, "must be set together"),
        ({"URL": "http://am", "TOKEN": TOKEN, "USER": "r", "PASSWORD": PASSWORD}, "not both"),
        ({"URL": "https://am", "INSECURE": "true", "CA_FILE": "/ca.pem"}, "set only one"),
    ],
)
def test_contradictions_fail_at_load(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(f"NODEFENCE_ALERTMANAGER_{name}", value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert expected in str(caught.value)
    for secret in (TOKEN, PASSWORD, "u:p@"):
        assert secret not in str(caught.value)
