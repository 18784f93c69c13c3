"""``import forklab`` stays light: the decorators load without Django (SPEC §7, STYLE)."""

from __future__ import annotations

import subprocess
import sys


def test_import_forklab_and_its_decorators_import_no_django() -> None:
    code = ("import sys, forklab\n"
            "assert 'forklab.sdk' not in sys.modules and 'forklab.engine' not in sys.modules\n"
            "@forklab.workflow('w')\n"
            "def w(x: str) -> str:\n"
            "    with forklab.step('s'):\n"
            "        return x\n"
            "assert w('ok') == 'ok'\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('django', 'rest_framework', 'channels', 'daphne'))\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
