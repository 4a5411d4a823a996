"""The one error of the sm90 layer."""
from __future__ import annotations

from cusyncgen.errors import CusyncError


class Sm90Error(CusyncError):
    """The sm90 library could not be built, loaded or launched, or rejected its arguments."""

    def __init__(self, message: str):
        super().__init__(message, None)
