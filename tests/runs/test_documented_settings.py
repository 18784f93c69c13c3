"""Every environment variable forklab's settings read is in the README's one table."""

from __future__ import annotations

import re
from pathlib import Path

import forklab.engine.environment
import forklab.settings

ROOT = Path(__file__).resolve().parents[2]


def read_variables() -> set[str]:
    """The variable names the settings (and the engine environment they check) read."""
    sources = (Path(forklab.settings.__file__).read_text()
               + Path(forklab.engine.environment.__file__).read_text())
    return set(re.findall(r'"((?:FORKLAB|DATABASE|REDIS)_[A-Z0-9_]+)"', sources))


def readme_table() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Configuration (environment variables)", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line for line in section.splitlines() if line.startswith("| `"))


def test_every_variable_the_settings_read_is_in_the_readmes_table() -> None:
    variables = read_variables()
    assert {"FORKLAB_HOME", "FORKLAB_SQLITE_TIMEOUT", "DATABASE_URL"} <= variables
    table = readme_table()
    assert sorted(v for v in variables if f"`{v}`" not in table) == []
