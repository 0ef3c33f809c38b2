"""The README's set-up lines are what CI runs: each line of the README's first shell block appears
verbatim in .ci/run, and .ci/run makes a fresh virtual environment for them (a leftover install on
the CI machine must not hide a missing dependency)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_lines() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README.md has no ```sh block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_setup_is_two_lines_and_ci_runs_them_verbatim():
    lines = _setup_lines()
    assert len(lines) == 2
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for line in lines:
        assert line in ci, f"README line not run by .ci/run: {line}"


def test_ci_installs_into_a_fresh_virtual_environment():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv" in ci and "activate" in ci
    assert ci.index("activate") < ci.index("pip install")
