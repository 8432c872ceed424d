"""What a team adopting nodefence checks first: the version from one source, the licence the
package declares in full, and a changelog that names the version."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nodefence

REPO = Path(__file__).resolve().parents[2]


def test_version_comes_from_one_source() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    result = subprocess.run(
        [sys.executable, "-m", "nodefence", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert "version" not in project["project"], "the version is written in one place only"
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "nodefence.__version__"}
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"nodefence {nodefence.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", nodefence.__version__)


def test_the_declared_licence_is_shipped_in_full() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    text = (REPO / "LICENSE").read_text()

    assert project["project"]["license"] == "Apache-2.0"
    assert "Apache License" in text.splitlines()[1]
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text


def test_the_changelog_has_an_unreleased_section_and_the_current_version() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", text, flags=re.MULTILINE)

    assert headings[0] == "Unreleased"
    assert nodefence.__version__ in headings
    assert "keepachangelog.com" in text
