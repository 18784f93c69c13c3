"""The built wheel carries what an installed forklab serves and runs from: the templates
(error pages and the login page included), the static files, the migrations, the demo
scenarios' graphs, and the console command."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import forklab
from tests.install.wheel import ROOT, build_wheel

pytestmark = pytest.mark.package


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = build_wheel(tmp_path_factory.mktemp("wheel"))
    assert built.name == f"forklab-{forklab.__version__}-py3-none-any.whl"
    return built


@pytest.fixture
def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def in_checkout(folder: str, pattern: str) -> set[str]:
    return {str(path.relative_to(ROOT)) for path in (ROOT / folder).rglob(pattern)}


def test_the_wheel_carries_every_template_and_static_file(wheel_names: set[str]) -> None:
    assert in_checkout("forklab/web/templates", "*.html") <= wheel_names
    assert {"forklab/web/templates/registration/login.html", "forklab/web/templates/404.html",
            "forklab/web/templates/500.html", "forklab/web/templates/base.html"} <= wheel_names
    assert {"forklab/web/static/forklab.css", "forklab/web/static/forklab.js"} <= wheel_names
    assert in_checkout("forklab/web/static", "*.*") <= wheel_names


def test_the_wheel_carries_the_migrations_and_the_demo_graphs(wheel_names: set[str]) -> None:
    migrations = in_checkout("forklab/runs/migrations", "*.py")
    assert "forklab/runs/migrations/0001_initial.py" in migrations <= wheel_names
    scenarios = in_checkout("forklab/engine/scenarios", "*.yaml")
    assert "forklab/engine/scenarios/research-write.yaml" in scenarios <= wheel_names


def test_the_wheel_installs_the_forklab_command(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        entry_points = archive.read(f"forklab-{forklab.__version__}.dist-info/entry_points.txt")
    assert entry_points.decode().split() == ["[console_scripts]", "forklab", "=",
                                             "forklab.console:main"]


def test_the_wheel_holds_nothing_outside_the_package(wheel_names: set[str]) -> None:
    assert {name.split("/")[0] for name in wheel_names} == {
        "forklab", f"forklab-{forklab.__version__}.dist-info"}
