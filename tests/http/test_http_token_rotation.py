"""Rotating the alert token without losing a webhook: several tokens at once, a token file
mounted from a Secret and re-read when the kubelet swaps it, and every refusal counted."""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from http_support import TOKEN, bearer, load_payload

from conftest import ClientFactory
from nodefence.errors import ConfigError
from nodefence.http.app import PROTECTED_PATHS
from nodefence.http.auth import Rejection
from nodefence.settings import load_settings

Client = TestClient[Any, Any]
OLD = "old-token-5b1f0c9e"
NEW = "new-token-a77d24e3"


class SecretVolume:
    """A directory laid out as the kubelet lays out a Secret volume: the key is a symlink to
    ``..data/<key>``, ``..data`` a symlink to a timestamped directory, and an update writes a
    new directory and swaps ``..data`` with one rename (Kubernetes' AtomicWriter)."""

    def __init__(self, root: Path, key: str = "alert-token") -> None:
        self.root = root
        self.key = key
        self.generation = 0
        root.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        return self.root / self.key

    def write(self, content: str) -> None:
        self.generation += 1
        target = self.root / f"..2026_12_01_15_00_{self.generation:02d}.{os.getpid()}"
        target.mkdir()
        (target / self.key).write_text(content)
        temporary = self.root / "..data_tmp"
        temporary.symlink_to(target.name)
        temporary.rename(self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(Path("..data") / self.key)


async def alerts(client: Client, token: str) -> int:
    response = await client.post(
        "/alerts", json=load_payload("am_firing.json"), headers=bearer(token)
    )
    return response.status


async def rejected(client: Client) -> dict[tuple[str, str], float]:
    """The refusals counted so far (the series of every path and reason start at zero)."""
    text = await (await client.get("/metrics")).text()
    counts: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("nodefence_webhook_rejected_total{"):
            labels, value = line.split("} ")
            pairs = dict(p.split("=") for p in labels.split("{", 1)[1].split(","))
            if float(value):
                counts[(pairs["path"].strip('"'), pairs["reason"].strip('"'))] = float(value)
    return counts


async def test_every_comma_separated_token_is_accepted(make_client: ClientFactory) -> None:
    client = await make_client(alert_token=f" {OLD} ,{NEW},")
    assert await alerts(client, OLD) == 200
    assert await alerts(client, NEW) == 200
    assert await alerts(client, f"{OLD},{NEW}") == 401
    assert await alerts(client, TOKEN) == 401
    assert (await client.post("/reconcile", headers=bearer(NEW))).status == 200


async def test_token_file_is_reread_when_the_kubelet_swaps_the_secret(
    make_client: ClientFactory, tmp_path: Path, log_stream: io.StringIO
) -> None:
    volume = SecretVolume(tmp_path / "token")
    volume.write(OLD + "\n")
    client = await make_client(alert_token=None, alert_token_file=volume.path)
    assert await alerts(client, OLD) == 200
    assert await alerts(client, NEW) == 401

    # Step 1 of a rotation: both tokens in the Secret, one per line.
    volume.write(f"{OLD}\n{NEW}\n")
    assert await alerts(client, NEW) == 200
    assert await alerts(client, OLD) == 200

    # Step 3: Alertmanager sends the new one; the old one leaves the Secret.
    volume.write(NEW)
    assert await alerts(client, OLD) == 401
    assert await alerts(client, NEW) == 200
    assert OLD not in log_stream.getvalue()
    assert NEW not in log_stream.getvalue()
    assert "alert_token_file_reloaded" in log_stream.getvalue()


async def test_token_file_and_variable_are_both_accepted(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    volume = SecretVolume(tmp_path / "token")
    volume.write(f"{NEW},")
    client = await make_client(alert_token=OLD, alert_token_file=volume.path)
    assert await alerts(client, OLD) == 200
    assert await alerts(client, NEW) == 200


async def test_a_token_file_emptied_after_start_keeps_the_last_tokens(
    make_client: ClientFactory, tmp_path: Path, log_stream: io.StringIO
) -> None:
    volume = SecretVolume(tmp_path / "token")
    volume.write(OLD)
    client = await make_client(alert_token=None, alert_token_file=volume.path)
    volume.write(" \n")
    assert await alerts(client, OLD) == 200
    assert "alert_token_file_unusable" in log_stream.getvalue()
    volume.write(NEW)
    assert await alerts(client, NEW) == 200
    assert await alerts(client, OLD) == 401


def test_a_missing_or_empty_token_file_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"NODEFENCE_ALERT_TOKEN_FILE .*absent.*cannot read"):
        load_settings(alert_token_file=tmp_path / "absent")
    empty = tmp_path / "empty"
    empty.write_text("\n , \n")
    with pytest.raises(ConfigError, match="holds no token"):
        load_settings(alert_token_file=empty)
    secret = tmp_path / "binary"
    secret.write_bytes(b"\xff\xfe" + OLD.encode())
    with pytest.raises(ConfigError) as raised:
        load_settings(alert_token_file=secret)
    assert OLD not in str(raised.value)


def test_a_token_variable_of_separators_only_is_refused() -> None:
    with pytest.raises(ConfigError, match="only separators"):
        load_settings(alert_token=" , ,")


async def test_refusals_are_counted_by_reason(make_client: ClientFactory) -> None:
    client = await make_client(basic_auth_user="am", basic_auth_password="pw")
    payload = load_payload("am_firing.json")
    wrong_basic = base64.b64encode(b"am:nope").decode()
    for headers in (
        {},
        {"Authorization": "  "},
        bearer("wrong"),
        {"Authorization": f"Basic {wrong_basic}"},
        {"Authorization": "Basic !!!"},
        {"Authorization": "Digest username=am"},
    ):
        assert (await client.post("/alerts", json=payload, headers=headers)).status == 401
    assert (await client.post("/reconcile", headers=bearer("wrong"))).status == 401
    assert (await client.post("/alerts", json=payload, headers=bearer())).status == 200
    assert await rejected(client) == {
        ("/alerts", "missing"): 2,
        ("/alerts", "bad-token"): 1,
        ("/alerts", "bad-basic"): 2,
        ("/alerts", "unsupported-scheme"): 1,
        ("/reconcile", "bad-token"): 1,
    }


async def test_bearer_to_a_basic_only_receiver_is_an_unsupported_scheme(
    make_client: ClientFactory,
) -> None:
    client = await make_client(alert_token=None, basic_auth_user="am", basic_auth_password="pw")
    assert await alerts(client, TOKEN) == 401
    assert await rejected(client) == {("/alerts", "unsupported-scheme"): 1}


async def test_every_refusal_series_starts_at_zero(client: Client) -> None:
    text = await (await client.get("/metrics")).text()
    series = [
        line for line in text.splitlines() if line.startswith("nodefence_webhook_rejected_total{")
    ]
    assert len(series) == len(PROTECTED_PATHS) * len(Rejection)
    assert all(line.endswith(" 0.0") for line in series)


async def test_a_missing_token_file_does_not_stop_a_receiver_with_auth_off(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    client = await make_client(
        alert_token=None, auth_disabled=True, alert_token_file=tmp_path / "absent"
    )
    assert await alerts(client, "anything") == 200
