"""Fixtures: one real sidecar (with its own PostgreSQL) for the whole session."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from harness import Sidecar, build_sidecar

import queenside

# Small enough that frame_too_large and overloaded are cheap to provoke.
MAX_FRAME_BYTES = 1 << 20


@pytest.fixture(scope="session")
def sidecar_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sidecar(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def sidecar(sidecar_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    sc = Sidecar(sidecar_bin, tmp_path_factory.mktemp("sidecar"), ["--max-frame-bytes", str(MAX_FRAME_BYTES)])
    sc.start()
    try:
        yield sc
    finally:
        sc.stop()


@pytest.fixture
def client(sidecar: Sidecar) -> Iterator[queenside.Client]:
    with queenside.Client(sidecar.socket, timeout=20) as c:
        yield c


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name no other test uses."""
    return unique_name(request.node.name)


def unique_name(hint: str) -> str:
    base = re.sub(r"[^A-Za-z0-9._:-]", "-", hint)[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def database_url(sidecar: Sidecar) -> str:
    """The sidecar's database, where an application calls the SQL API in its own transactions."""
    return sidecar.database_url()
