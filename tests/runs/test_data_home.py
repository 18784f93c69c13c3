"""Where an installed forklab keeps its data: under FORKLAB_HOME (the per-user data directory
by default), each piece movable, and never inside the installed package."""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

import forklab

PACKAGE_DIR = Path(forklab.__file__).resolve().parent
SETTINGS_FILE = PACKAGE_DIR / "settings.py"


def fresh_settings(home: Path, **env: str) -> dict[str, Any]:
    """``forklab/settings.py`` executed anew, as a new process would, for a user whose home
    directory is ``home``, with no ``FORKLAB_``/XDG variable but ``env``."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({k: v for k, v in saved.items()
                       if not k.startswith(("FORKLAB_", "XDG_", "DATABASE_URL"))})
    os.environ.update({"HOME": str(home), **env})
    try:
        return runpy.run_path(str(SETTINGS_FILE), run_name="forklab_settings_fresh_start")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def written_paths(settings: dict[str, Any]) -> dict[str, Path]:
    db = settings["DATABASES"]["default"]
    return {"FORKLAB_HOME": settings["FORKLAB_HOME"], "VAR_DIR": settings["VAR_DIR"],
            "SECRET_KEY_FILE": settings["SECRET_KEY_FILE"],
            "STATIC_ROOT": settings["STATIC_ROOT"], "database": Path(db["NAME"]),
            "test database": Path(db["TEST"]["NAME"])}


def test_by_default_every_path_is_in_the_users_data_dir_and_none_in_the_package(
        tmp_path: Path) -> None:
    settings = fresh_settings(tmp_path)
    home = tmp_path / ".local" / "share" / "forklab"
    assert settings["FORKLAB_HOME"] == home
    for name, path in written_paths(settings).items():
        assert path.is_relative_to(home), name
        assert not path.resolve().is_relative_to(PACKAGE_DIR), name
    assert (home / "secret_key").exists() and (home / "forklab.sqlite3").parent.is_dir()
    assert settings["STATIC_ROOT"] == home / "static"


def test_forklab_home_moves_everything(tmp_path: Path) -> None:
    settings = fresh_settings(tmp_path / "user", FORKLAB_HOME=str(tmp_path / "data"))
    for name, path in written_paths(settings).items():
        assert path.is_relative_to(tmp_path / "data"), name
    assert not (tmp_path / "user").exists()


def test_each_piece_can_be_put_elsewhere(tmp_path: Path) -> None:
    settings = fresh_settings(
        tmp_path, FORKLAB_HOME=str(tmp_path / "data"), FORKLAB_VAR_DIR=str(tmp_path / "var"),
        FORKLAB_SECRET_KEY_FILE=str(tmp_path / "keys" / "forklab"),
        FORKLAB_STATIC_ROOT=str(tmp_path / "www"))
    assert written_paths(settings)["database"] == tmp_path / "var" / "forklab.sqlite3"
    assert settings["SECRET_KEY"] == (tmp_path / "keys" / "forklab").read_text()
    assert settings["STATIC_ROOT"] == tmp_path / "www"


def test_the_xdg_data_home_is_respected(tmp_path: Path) -> None:
    settings = fresh_settings(tmp_path / "user", XDG_DATA_HOME=str(tmp_path / "xdg"))
    assert settings["FORKLAB_HOME"] == tmp_path / "xdg" / "forklab"
