"""The Python versions the package and its integrations declare (their classifiers), one per line, oldest first.

    python scripts/declared_pythons.py          # every declared version
    python scripts/declared_pythons.py --ends   # the oldest and the newest

Read by scripts/setup.sh (which environments to make) and tests/test_smoke_pythons.py (which to run).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECTS = [ROOT / "pyproject.toml", *sorted(ROOT.glob("integrations/*/pyproject.toml"))]


def declared() -> list[str]:
    """Versions every pyproject declares (``Programming Language :: Python :: 3.X``), oldest first."""
    sets = [set(re.findall(r'"Programming Language :: Python :: (3\.\d+)"', p.read_text())) for p in PYPROJECTS]
    common = set.intersection(*sets) if sets else set()
    return sorted(common, key=lambda v: tuple(map(int, v.split("."))))


if __name__ == "__main__":
    versions = declared()
    if "--ends" in sys.argv[1:] and versions:
        versions = list(dict.fromkeys([versions[0], versions[-1]]))
    print("\n".join(versions))
