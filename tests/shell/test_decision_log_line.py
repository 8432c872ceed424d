"""The decision's log line: one line per decision, each reason in it once, and loggers that
follow a later configuration of logging (a level, a stream) instead of keeping the first."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest

from nodefence.engine.model import Decision, PurgePodAction, Reason, Verdict
from nodefence.observability.logging import configure_logging
from nodefence.shell.report import Reporter

NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


pytestmark = pytest.mark.usefixtures("restore_logging")


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def refusal() -> Decision:
    return Decision(
        Verdict.NOOP,
        "worker1",
        (
            Reason("node-found", True, "node worker1 exists"),
            Reason("ready", False, "node worker1 is Ready: nothing to fence"),
            Reason("lease", False, "its Lease was renewed 3s ago"),
        ),
        alertname="KubeNodeNotReady",
        fingerprint="fp-1",
        status="firing",
        now=NOW,
    )


def test_a_refusal_is_one_line_with_each_reason_once() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    Reporter.log_decision(refusal())

    (line,) = lines(stream)
    assert line["event"] == "decision"
    assert line["verdict"] == "noop"
    assert line["blocked_by"] == "ready"
    assert line["summary"] == "node worker1 is Ready: nothing to fence"
    assert line["reasons"] == [
        "node worker1 exists",
        "node worker1 is Ready: nothing to fence",
        "its Lease was renewed 3s ago",
    ]
    assert line["actions"] == []
    assert stream.getvalue().count("its Lease was renewed 3s ago") == 1


def test_a_dry_run_line_names_the_actions_it_would_have_taken() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    purge = PurgePodAction("db", "db-0", "uid-1", "worker1")
    decision = Decision(
        Verdict.PURGE,
        "worker1",
        (Reason("verdict", True, "fenced; 1 pod left to purge"),),
        actions=(purge,),
        dry_run=True,
        now=NOW,
    )
    Reporter.log_decision(decision)

    (line,) = lines(stream)
    assert line["dry_run"] is True
    assert line["blocked_by"] is None
    assert len(line["actions"]) == 1  # type: ignore[arg-type]
    assert "db/db-0" in line["actions"][0]  # type: ignore[index]


def test_loggers_follow_a_later_configuration() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", "info", stream=first)
    Reporter.log_decision(refusal())
    configure_logging("json", "warning", stream=second)
    Reporter.log_decision(refusal())
    configure_logging("json", "info", stream=second)
    Reporter.log_decision(refusal())

    assert len(lines(first)) == 1
    assert len(lines(second)) == 1
