"""Rotating the alert token as deploy/README.md says, with a real Alertmanager in front of
``nodefence serve``: nodefence's token file (laid out and swapped as the kubelet swaps a mounted
Secret) takes both tokens, Alertmanager's credentials file switches to the new one, the old one
leaves; no notification fails on the way. A side left behind is refused, counted by reason, and
Alertmanager counts the notification failed."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from bench.processes import Processes, eventually, http

from .harness import (
    Alertmanager,
    Prometheus,
    start_alertmanager,
    start_nodefence,
    start_prometheus,
    start_simulator,
    write_token_file,
)

pytestmark = pytest.mark.e2e

OLD = "old-6c0f1e0a93b24a4d"
NEW = "new-0d9e2b7c11f84c5e"
WRONG = "wrong-7a1c44d0e2b9"


class SecretVolume:
    """The kubelet's layout of a mounted Secret: ``tokens`` -> ``..data/tokens``, and an update
    is a new directory and one rename of the ``..data`` symlink."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0
        root.mkdir(parents=True)

    @property
    def path(self) -> Path:
        return self.root / "tokens"

    def write(self, content: str) -> None:
        self.generation += 1
        target = self.root / f"..2026_12_01_{self.generation:04d}"
        target.mkdir()
        (target / "tokens").write_text(content)
        swap = self.root / "..data_tmp"
        swap.symlink_to(target.name)
        swap.rename(self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(Path("..data") / "tokens")


def replace(path: Path, content: str) -> None:
    """Alertmanager's credentials file, replaced in one rename as a Secret update does."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(content)
    os.replace(fresh, path)


def notify(manager: Alertmanager, node: str) -> None:
    """A trigger alert for a node of its own (its own group, so one notification at once)."""
    now = datetime.now(UTC)
    alert = {
        "labels": {"alertname": "NodefenceNodeNotReady", "node": node, "severity": "none"},
        "startsAt": (now - timedelta(minutes=2)).isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }
    status, body = http("POST", f"{manager.url}/api/v2/alerts", [alert])
    assert status == 200, body


def delivered(manager: Alertmanager, before: int) -> tuple[int, int]:
    """The next notification sent and answered: the next step of the rotation must not race a
    request still on its way with the credentials of the step before."""

    def answered() -> tuple[int, int] | None:
        counts = manager.webhook_counts()
        if counts[0] > before and manager.webhook_requests() >= counts[0]:
            return counts
        return None

    found: tuple[int, int] = eventually(
        answered, within=60, what="Alertmanager sent the notification and had its answer"
    )
    return found


def rejected(url: str) -> dict[str, float]:
    status, raw = http("GET", f"{url}/metrics")
    assert status == 200
    found: dict[str, float] = {}
    for line in raw.decode().splitlines():
        if line.startswith("nodefence_webhook_rejected_total{"):
            labels, value = line.rsplit(" ", 1)
            if float(value):
                found[labels] = float(value)
    return found


def scraped(prometheus: Prometheus) -> bool:
    """Prometheus holds a few samples of the refusal counters (all zero so far)."""
    query = 'count_over_time(nodefence_webhook_rejected_total{reason="bad-token"}[1m]) >= 3'
    status, raw = http("GET", f"{prometheus.url}/api/v1/query?query={quote(query)}")
    return status == 200 and b'"reason":"bad-token"' in raw


def rejection_alerts(prometheus: Prometheus) -> list[dict[str, object]]:
    return [
        a
        for a in prometheus.alerts()
        if a["labels"].get("alertname") == "NodefenceWebhookRejected" and a["state"] == "firing"
    ]


def test_a_rotation_by_the_procedure_loses_no_notification(procs: Processes) -> None:
    sim = start_simulator(procs)
    volume = SecretVolume(procs.workdir / "nodefence-alert-tokens")
    volume.write(OLD)
    nodefence = start_nodefence(
        procs,
        sim,
        "",
        env={"NODEFENCE_ALERT_TOKEN": "", "NODEFENCE_ALERT_TOKEN_FILE": str(volume.path)},
    )
    credentials = write_token_file(procs.workdir, OLD)
    manager = start_alertmanager(procs, "alertmanager", nodefence, credentials)
    prometheus = start_prometheus(procs, sim, nodefence, [manager.url])

    sent, failed = manager.webhook_counts()
    notify(manager, "rotation-0")
    sent, failed = delivered(manager, sent)
    assert failed == 0

    # 1. nodefence accepts both; 2. Alertmanager sends the new one; 3. the old one leaves.
    volume.write(f"{OLD}\n{NEW}\n")
    notify(manager, "rotation-1")
    sent, failed = delivered(manager, sent)
    replace(credentials, NEW)
    notify(manager, "rotation-2")
    sent, failed = delivered(manager, sent)
    volume.write(NEW)
    notify(manager, "rotation-3")
    sent, failed = delivered(manager, sent)
    assert failed == 0, "a notification failed during the rotation"
    assert rejected(nodefence.url) == {}
    # The shipped rule, evaluated by a real Prometheus on the scraped receiver: quiet so far.
    eventually(lambda: scraped(prometheus), within=60, what="Prometheus scraped nodefence")
    assert not rejection_alerts(prometheus)

    # A side left behind: Alertmanager's token changed alone.
    replace(credentials, WRONG)
    notify(manager, "rotation-4")
    eventually(
        lambda: manager.webhook_counts()[1] > failed,
        within=60,
        what="Alertmanager counted the refused notification as failed",
    )
    # (Earlier groups repeat with the wrong token too: at least this one was refused.)
    refused = rejected(nodefence.url)
    assert set(refused) == {'nodefence_webhook_rejected_total{path="/alerts",reason="bad-token"}'}
    assert min(refused.values()) >= 1
    firing = eventually(
        lambda: rejection_alerts(prometheus),
        within=60,
        what="NodefenceWebhookRejected firing in Prometheus",
    )
    assert [(a["labels"]["path"], a["labels"]["reason"]) for a in firing] == [
        ("/alerts", "bad-token")
    ]
