"""Reading the client's README.md as printed, for the tests that run it: a
section, its Python programs by file name, and its "Run them" block."""

from __future__ import annotations

import re
from typing import Dict, List, Tuple

from harness import REPO

README = REPO / "clients" / "python" / "README.md"


def section(heading: str) -> str:
    """The text under ``## heading``, up to the next ``## ``."""
    return README.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def programs(text: str) -> Dict[str, str]:
    """The Python blocks of ``text``, by the file name each one's first line gives."""
    found: Dict[str, str] = {}
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        name = re.match(r"# (\w+\.py)\b", block)
        assert name, f"a block does not say its file name:\n{block}"
        found[name.group(1)] = block
    return found


def printed_runs(text: str) -> List[Tuple[str, List[str]]]:
    """The commands of the "Run them" block of ``text``, each with the lines
    it prints ("^C" marks where Ctrl-C is pressed)."""
    block = text.split("Run them:\n\n", 1)[1].split("\n\n", 1)[0]
    runs: List[Tuple[str, List[str]]] = []
    for line in block.splitlines():
        assert line.startswith("    "), line
        line = line[4:]
        if line.startswith("$ "):
            runs.append((line[2:], []))
        else:
            runs[-1][1].append(line)
    return runs
