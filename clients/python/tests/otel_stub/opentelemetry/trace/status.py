"""opentelemetry.trace.status: a span's status."""

from __future__ import annotations

import enum
from typing import Optional

__all__ = ["Status", "StatusCode"]


class StatusCode(enum.Enum):
    UNSET = 0
    OK = 1
    ERROR = 2


class Status:
    def __init__(self, status_code: StatusCode = StatusCode.UNSET, description: Optional[str] = None) -> None:
        self._status_code = status_code
        # As in the real API, only an error keeps its description.
        self._description = description if status_code is StatusCode.ERROR else None

    @property
    def status_code(self) -> StatusCode:
        return self._status_code

    @property
    def description(self) -> Optional[str]:
        return self._description

    @property
    def is_ok(self) -> bool:
        return self._status_code is not StatusCode.ERROR
