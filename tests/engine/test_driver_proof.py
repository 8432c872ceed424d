"""A driver says what its proof is (none, written, read back) in its row of ``engine.drivers``;
the engine and the CLI judge and word the proof by that, never by the driver's name: a new
driver that writes its proof as external fencing does is judged as the annotation driver is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from engine_factories import NOW, ago, event, facts, policy

from nodefence.engine import drivers
from nodefence.engine.decide import decide
from nodefence.engine.drivers import DriverKind, Proof
from nodefence.engine.evidence import PowerEvidence
from nodefence.engine.model import Verdict

SERVICE = Path(__file__).resolve().parents[2] / "service" / "nodefence"
# The engine and the CLI (the per-rule summary of check-config, the operator's commands).
READERS = ("engine/*.py", "cli.py", "commands/*.py")


@pytest.fixture
def scribe(monkeypatch: pytest.MonkeyPatch) -> str:
    """A driver whose proof someone else writes, named nothing the engine knows."""
    kind = DriverKind("scribe", "nodefence.fencing.drivers.annotation", proof=Proof.WRITTEN)
    monkeypatch.setitem(drivers.DRIVERS, kind.name, kind)
    return kind.name


@pytest.fixture
def hunch(monkeypatch: pytest.MonkeyPatch) -> str:
    """A driver with no proof at all, named nothing the engine knows."""
    kind = DriverKind("hunch", proof=Proof.NONE)
    monkeypatch.setitem(drivers.DRIVERS, kind.name, kind)
    return kind.name


def _power_reason(decision: object) -> str:
    reasons = decision.reasons  # type: ignore[attr-defined]
    return next(r.message for r in reasons if r.guard == "power-off")


def test_each_driver_says_its_proof() -> None:
    said = {name: kind.proof for name, kind in drivers.DRIVERS.items()}
    assert said == {
        "redfish": Proof.READ_BACK,
        "ipmi": Proof.READ_BACK,
        "fence-agent": Proof.READ_BACK,
        "annotation": Proof.WRITTEN,
        "http": Proof.READ_BACK,
        "none": Proof.NONE,
    }


def test_a_written_proof_is_judged_by_the_row_not_the_name(scribe: str) -> None:
    written = PowerEvidence("off", "ConfigMap nodefence/p", "k=off", at=ago(60))
    rule = policy(rule={"fencing": {"driver": scribe}})
    fenced = decide(event(), facts(lease_age=900, power=written), rule, NOW)
    assert fenced.verdict is Verdict.FENCE
    assert "after the API server last saw the node renew" in _power_reason(fenced)
    # Written before the node's last sign of life, as for the annotation driver: no proof.
    stale = PowerEvidence("off", "ConfigMap nodefence/p", "k=off", at=ago(1000))
    refused = decide(event(), facts(lease_age=900, power=stale), rule, NOW)
    assert refused.verdict is Verdict.NOOP
    assert "a proof from before the machine went silent" in _power_reason(refused)


def test_no_proof_is_judged_by_the_row_not_the_name(hunch: str) -> None:
    decision = decide(event(), facts(), policy(rule={"fencing": {"driver": hunch}}), NOW)
    assert decision.verdict is Verdict.FENCE
    assert _power_reason(decision).startswith("no proof: rule 'default' chose fencing.driver")


def test_nothing_compares_a_driver_s_name() -> None:
    compared = []
    for path in sorted(p for part in READERS for p in SERVICE.glob(part)):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            named = any(isinstance(s, ast.Attribute) and s.attr == "driver" for s in sides)
            literal = any(isinstance(s, ast.Constant) and s.value in drivers.DRIVERS for s in sides)
            if named and literal:
                compared.append(f"{path.relative_to(SERVICE)}:{node.lineno}")
    assert compared == []


def test_check_config_words_a_rule_by_its_driver_s_proof(scribe: str, hunch: str) -> None:
    from nodefence.cli import _fencing_summary
    from nodefence.policy import parse_policy

    rules = [
        {"name": "written", "fencing": {"driver": scribe, "annotation": "example.com/off"}},
        {"name": "none", "fencing": {"driver": hunch}},
    ]
    said = _fencing_summary(parse_policy({"rules": rules}), None, "nodefence")
    assert said["written"].startswith("annotation: external proof, example.com/off=off on")
    assert said["none"].startswith("fencing.driver none: NO PROOF; fences on inference alone")
