"""The code map in CONTRIBUTING.md and the README's Layout stay true: every path they name
exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_path_the_code_map_names_exists() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text()
    named = set(re.findall(r"`((?:service|tests|deploy|alertrules|docs)/[^`\s]+)`", text))
    assert len(named) > 20, "the code map names the places a newcomer extends"
    # The invariant index names tests as path::name; the index's own test checks the names.
    missing = sorted(p for p in named if not (REPO / p.split("::")[0]).exists())
    assert missing == [], missing


def test_every_path_the_readme_layout_names_exists() -> None:
    text = (REPO / "README.md").read_text()
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:service|tests|deploy|alertrules|docs)/[^`\s]+)`", layout))
    assert len(named) > 20, "the Layout names where each part of the package lives"
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert missing == [], missing
