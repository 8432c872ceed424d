"""Text from nodes and from whoever may edit nodefence's ConfigMaps is shown to the operator,
never obeyed by their terminal: a node's own credentials write its Ready condition's reason, and
``explain``, ``status``, ``pause`` and ``resume`` print it with every control character shown as
a visible escape, while ``-o json`` keeps the value exact. Checked with the real kubectl writing
the hostile text into the simulated cluster, as a node's kubelet credentials could."""

from __future__ import annotations

import json

import pytest

from .operator_support import KUBECTL, Cluster

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]

FORGED = "Node compute01 is Ready; never fenced"
# OSC 52 (write the clipboard), a carriage return that lets a forged line overwrite the real one,
# a newline that starts one, a C1 CSI, a right-to-left override and a DEL.
HOSTILE = f"\x1b]52;c;ZWNobyBwd25lZCA+Pn4vLmJhc2hyYw==\x07\r{FORGED}\n{FORGED}\x9b2J\u202edelif\x7f"
# None of these may reach a terminal as they are.
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\x7f")
ENV = {"NODEFENCE_AUTH_DISABLED": "true"}


def _write_ready_condition(cluster: Cluster, node: str, reason: str, message: str) -> None:
    """What a node's credentials may write: its own status's Ready condition."""
    patch = cluster.workdir / "ready.json"
    condition = {"type": "Ready", "status": "Unknown", "reason": reason, "message": message}
    patch.write_text(json.dumps({"status": {"conditions": [condition]}}))
    result = cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=strategic",
        "--patch-file", str(patch),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ready = [c for c in cluster.node(node)["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["reason"] == reason


def _shown_not_obeyed(text: str) -> None:
    for char in RAW:
        assert char not in text, f"{char!r} reached the terminal:\n{text!r}"
    lines = text.split("\n")
    assert not [line for line in lines if line.startswith(FORGED)], text


def _run(cluster: Cluster, *args: str) -> str:
    result = cluster.nodefence(*args, env=ENV)
    assert result.returncode == 0, result.stderr
    _shown_not_obeyed(result.stderr)
    return result.stdout


def test_explain_shows_a_hostile_ready_reason_escaped_and_json_keeps_it(cluster: Cluster) -> None:
    cluster.down("compute01", since_seconds=1200)
    _write_ready_condition(cluster, "compute01", HOSTILE, HOSTILE)

    text = _run(cluster, "explain", "compute01")

    _shown_not_obeyed(text)
    (ready,) = [line for line in text.split("\n") if line.startswith("  ok  ready: ")]
    assert "(\\x1b]52;c;ZWNobyBwd25lZCA+Pn4vLmJhc2hyYw==\\x07\\rNode compute01" in ready
    assert f"\\n{FORGED}\\x9b2J\\u202edelif\\x7f)" in ready
    report = json.loads(_run(cluster, "explain", "compute01", "-o", "json"))
    (reason,) = [r for r in report["decision"]["reasons"] if r["guard"] == "ready"]
    assert reason["message"].endswith(f"Ready is Unknown ({HOSTILE})")


def test_status_pause_and_resume_show_a_hostile_pause_reason_escaped(cluster: Cluster) -> None:
    paused = _run(cluster, "pause", "--reason", HOSTILE, "--by", f"ops\r{FORGED}")
    _shown_not_obeyed(paused)
    assert "\\x1b]52;c;" in paused

    status = _run(cluster, "status")
    _shown_not_obeyed(status)
    (line,) = [line for line in status.split("\n") if line.startswith("Pause switch: PAUSED")]
    assert f"\\rNode compute01 is Ready; never fenced\\n{FORGED}" in line
    as_json = json.loads(_run(cluster, "status", "-o", "json"))
    assert as_json["pause"]["reason"] == HOSTILE
    assert as_json["pause"]["by"] == f"ops\r{FORGED}"

    resumed = _run(cluster, "resume", "--by", "ops")
    _shown_not_obeyed(resumed)
    assert "\\x1b]52;c;" in resumed


def test_a_failure_line_quoting_outside_text_is_escaped(cluster: Cluster) -> None:
    """stderr goes through the same writer: the name given is quoted back escaped."""
    result = cluster.nodefence("explain", f"compute09{HOSTILE}", env=ENV)

    assert result.returncode == 1
    assert "does not exist in the cluster" in result.stderr
    assert "compute09\\x1b]52;c;" in result.stderr
    _shown_not_obeyed(result.stderr)
    assert result.stdout == ""
