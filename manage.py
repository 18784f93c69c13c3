#!/usr/bin/env python
"""Django's command-line utility for forklab, from a source checkout.

A checkout keeps its data in its own ``var/`` (unless FORKLAB_HOME says otherwise), as
``./dev`` does; an installed forklab uses the per-user data directory (``forklab`` command).
"""

import os
import sys
from pathlib import Path


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forklab.settings")
    os.environ.setdefault("FORKLAB_HOME", str(Path(__file__).resolve().parent / "var"))
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
