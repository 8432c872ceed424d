"""``nodefence demo --approval`` tells its story and exits 0 only if every step was observed."""

from __future__ import annotations

import io

from nodefence_sim.demo.approval_story import run_approval_demo


async def test_approval_demo_passes() -> None:
    out = io.StringIO()
    assert await run_approval_demo(out) == 0, out.getvalue()
    text = out.getvalue()
    assert "nodefence posts one question to the Slack channel" in text
    assert "approved by U0ONCALL" in text
    assert "FAILED" not in text
