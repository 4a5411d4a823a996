"""Where the package's data lives: a leaf module (no cusyncgen import), so that the parser, the
emitter and the GPU layer find their files without importing the package's front end."""
from __future__ import annotations

from pathlib import Path


def data_path(name: str) -> Path:
    """The directory ``grammar``, ``templates``, ``runtime_cuda`` or ``examples``: in the repository
    (editable install) or under ``cusyncgen/_data/`` (wheel, see pyproject's force-include)."""
    here = Path(__file__).resolve().parent
    packaged = here / "_data" / name
    if packaged.is_dir():
        return packaged
    return here.parent / name
