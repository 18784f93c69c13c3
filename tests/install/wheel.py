"""Building forklab's wheel from this checkout, as a release would (used by test_wheel.py
and the install smoke test, smoke.py).

The build runs in a copy of what the wheel is built from (pyproject.toml, README.md,
forklab/), so it leaves no build/ or egg-info directory in the checkout and two builds at
once never share one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(dest: Path) -> Path:
    """Build the wheel into ``dest``; return its path (RuntimeError with pip's output if the
    build fails)."""
    with tempfile.TemporaryDirectory(prefix="forklab-build-") as tmp:
        source = Path(tmp) / "forklab-src"
        source.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, source / name)
        shutil.copytree(ROOT / "forklab", source / "forklab",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                               "--disable-pip-version-check", "-w", str(dest), str(source)],
                              capture_output=True, text=True, cwd=tmp)
        if done.returncode != 0:
            raise RuntimeError(f"building the wheel failed:\n{done.stdout}{done.stderr}")
    (wheel,) = dest.glob("forklab-*.whl")
    return wheel
