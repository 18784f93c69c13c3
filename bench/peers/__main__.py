"""``python -m bench.peers``: see :mod:`bench.peers.run`."""

import sys

from bench.peers.run import main

sys.exit(main())
