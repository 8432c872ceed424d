"""The test run's summary names the suites skipped for want of a tool."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with the suite's conftest and an explicit asyncio loop scope."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST.read_text())
    return pytester


def test_summary_lists_each_missing_tool_with_its_files(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_rules="""
        import pytest

        @pytest.mark.skipif(True, reason="promtool is not installed")
        def test_a(): pass

        @pytest.mark.skipif(True, reason="promtool is not installed")
        def test_b(): pass
        """,
        test_clock="""
        import pytest

        def test_c():
            pytest.skip("needs faketime (Debian package faketime)")

        def test_d(): pass
        """,
    )
    result = project.runpytest("-q")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(
        [
            "*skipped suites*",
            "1 skipped: needs faketime (Debian package faketime) (test_clock.py)",
            "2 skipped: promtool is not installed (test_rules.py)",
            "*bash .ci/run installs every tool*",
        ]
    )


def test_no_section_when_nothing_skipped(project: pytest.Pytester) -> None:
    project.makepyfile(test_ok="def test_ok(): pass")
    result = project.runpytest("-q")
    result.assert_outcomes(passed=1)
    assert "skipped suites" not in result.stdout.str()
