"""Bytes on disk of a system's store directory, measured the same way for every system."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench.peers.outcome import META

_SIDECARS = ("-wal", "-shm", "-journal")


def checkpoint(directory: Path) -> None:
    """Fold every SQLite write-ahead log back into its database file.

    A system that leaves a connection open (LangGraph's ``SqliteCache`` has no ``close``)
    can leave its last writes in ``-wal``; checkpointing first makes the sizes comparable.
    """
    for path in sorted(directory.iterdir()):
        if path.name == META or path.name.endswith(_SIDECARS):
            continue
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()


def store_bytes(directory: Path) -> int:
    """Every file of the directory but the harness's own ``meta.json``, after a checkpoint."""
    checkpoint(directory)
    return sum(p.stat().st_size for p in directory.iterdir() if p.name != META)
