"""Lets the examples run from a checkout without installing the client.

When ``queenside`` is not installed (``pip install ./clients/python``), the
client's sources beside these examples are used instead.
"""

import sys
from pathlib import Path

try:
    import queenside  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
