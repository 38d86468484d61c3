"""Run the installed ``jiyu`` console script as a user's shell would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

JIYU = Path(sys.executable).with_name("jiyu")


def jiyu(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    assert JIYU.exists(), f"the jiyu console script is not installed next to {sys.executable}"
    return subprocess.run([str(JIYU), *args], capture_output=True, text=True, timeout=timeout, **kwargs)
