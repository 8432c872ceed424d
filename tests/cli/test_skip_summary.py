"""The test run's summary names the suites skipped for want of a tool."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
CONFTEST = REPO / "tests" / "conftest.py"


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


def test_summary_is_written_when_parallel_workers_run_the_tests(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make test`` runs the suite on pytest-xdist's workers: the process that gathers their
    reports still lists what they skipped."""
    project.makepyfile(
        test_rules="""
        import pytest

        @pytest.mark.skipif(True, reason="promtool is not installed")
        def test_a(): pass

        def test_b(): pass
        """,
        test_clock="""
        import pytest

        def test_c():
            pytest.skip("needs faketime (Debian package faketime)")
        """,
    )
    # The suite's conftest imports the checkout's tests package.
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = project.runpytest_subprocess("-q", "-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*skipped suites*",
            "1 skipped: needs faketime (Debian package faketime) (test_clock.py)",
            "1 skipped: promtool is not installed (test_rules.py)",
            "*bash .ci/run installs every tool*",
        ]
    )
