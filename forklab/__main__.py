"""``python -m forklab``: the ``forklab`` console command (forklab.console)."""

from forklab.console import main

main()
