"""The demo's timeline reads as one story: each table once, counts that agree, no "proof: no
proof:", and no raw log line between its steps."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


def _demo(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "nodefence", "demo", *args],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result.stdout


def _raw_log_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.lstrip().startswith("{")]


@pytest.mark.timeout(180)
def test_the_inference_demo_shows_each_table_once_and_counts_that_agree() -> None:
    out = _demo()

    assert out.count("NAME                                         STATUS") == 1
    assert "proof: no proof" not in out
    assert _raw_log_lines(out) == []
    in_all = re.search(r"(\d+) pods purged in all: the (\d+) the decision listed", out)
    assert in_all is not None, out
    listed = re.search(r"\[purge\] (\d+) pod\(s\) to purge", out)
    assert listed is not None
    assert in_all.group(2) == listed.group(1)
    event_counts = set(re.findall(r"NodeFenced .*?(\d+) pods purged", out))
    assert event_counts == {in_all.group(1)}, event_counts
    # The Events are shown once, as kubectl describe prints them (or as read, without kubectl).
    assert out.count("out-of-service taint removed: node control02 is healthy again") == 1


@pytest.mark.timeout(180)
def test_the_approval_demo_has_no_raw_log_line() -> None:
    out = _demo("--approval")

    assert "Someone who is not an approver presses Approve" in out
    assert _raw_log_lines(out) == []
