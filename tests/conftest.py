"""Shared pytest setup: the repository root on sys.path and the --regen-golden option."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite tests/golden/ from the current output instead of comparing")


@pytest.fixture
def regen_golden(request) -> bool:
    return request.config.getoption("--regen-golden")


@pytest.fixture
def golden(regen_golden):
    """golden(path, text): compare ``text`` with the file, or rewrite it under --regen-golden."""

    def check(path: Path, text: str) -> None:
        if regen_golden:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"missing golden file {path}; run pytest --regen-golden"
        assert text == path.read_text(), f"{path} differs; review and run pytest --regen-golden"

    return check
