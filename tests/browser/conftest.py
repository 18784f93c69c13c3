"""Real-browser tests: Playwright drives Debian's chromium against a live daphne server.

One server for the session, started as a subprocess on a free port against a fresh SQLite
file in a temporary FORKLAB_HOME, after ``migrate``, ``demo``, a slow recorded run and a
few extra users and projects (``manage.py shell``). Never ``playwright install``: the browser
is /usr/bin/chromium (``./dev test`` installs it with apt when missing).

Screenshots go to ``artifacts/screenshots/`` (git-ignored) for a reviewer to look at.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("FORKLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
PASSWORD = "pw-browser-1"

# Playwright's sync API runs an event loop in this thread; Django refuses ORM calls from a
# thread with a running loop unless told otherwise. Tests only.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

SETUP = f"""
from django.contrib.auth import get_user_model
from forklab.runs.models import Membership, Project, Role
User = get_user_model()
demo = Project.objects.get(slug="demo")
other, _ = Project.objects.get_or_create(slug="other", defaults={{"name": "Other team"}})
for name, project, role in (("bob", demo, Role.MEMBER), ("vera", demo, Role.VIEWER),
                            ("eve", other, Role.ADMIN)):
    user, _ = User.objects.get_or_create(username=name)
    user.set_password({PASSWORD!r})
    user.save()
    Membership.objects.update_or_create(user=user, project=project, defaults={{"role": role}})
demo_user = User.objects.get(username="demo")
demo_user.set_password({PASSWORD!r})
demo_user.save()
"""


@dataclass(frozen=True)
class Server:
    url: str
    var_dir: Path
    env: dict[str, str]

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, check=True, timeout=120)
        return done.stdout.strip()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)  # polling a starting server, not synchronising the test itself
    raise RuntimeError(f"daphne did not answer {url}/healthz within {timeout} s")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium` "
                    "(./dev test does)")
    var_dir = tmp_path_factory.mktemp("forklab-var")
    # the server's whole data directory (database, static files) is the temporary one
    env = {**os.environ, "FORKLAB_HOME": str(var_dir), "FORKLAB_VAR_DIR": str(var_dir),
           "FORKLAB_STATIC_ROOT": str(var_dir / "static"), "FORKLAB_TASK_WORKERS": "6",
           "DJANGO_SETTINGS_MODULE": "forklab.settings", "FORKLAB_LOG_LEVEL": "WARNING",
           # a trace imported by a test is forked right away (trace_arriving has API tests)
           "FORKLAB_TRACE_SETTLE_S": "0"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    port = _free_port()
    srv = Server(url=f"http://127.0.0.1:{port}", var_dir=var_dir, env=env)
    srv.manage("migrate", "--noinput", "-v0")
    # as `forklab serve` does: with debug off, WhiteNoise serves only what collectstatic wrote
    srv.manage("collectstatic", "--noinput", "-v0")
    srv.manage("demo")
    srv.manage("record", str(ROOT / "tests" / "browser" / "slow.yaml"), "--project", "demo",
               "--label", "slow")
    # a long run (~1,000 events) whose count fails deep inside, and a second research-write
    # run with another goal (two arbitrary runs of one graph to compare)
    srv.manage("record", str(ROOT / "tests" / "web" / "long.yaml"), "--project", "demo",
               "--input", '{"counter": 0, "fail_at": 80}', "--label", "long")
    srv.manage("record", "research-write", "--project", "demo", "--input",
               '{"goal": "Explain how tides work"}', "--label", "tides")
    srv.manage("shell", "-c", SETUP)
    log = (var_dir / "daphne.log").open("wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
         "forklab.asgi:application"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(srv.url, process)
        yield srv
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def new_page(browser: object, server: Server) -> Iterator[object]:
    """A factory of pages, each in its own browser context (its own cookies)."""
    contexts = []

    def make(username: str | None = None, *, width: int = 1440, height: int = 1000) -> object:
        context = browser.new_context(viewport={"width": width, "height": height},  # type: ignore[attr-defined]
                                      base_url=server.url)
        context.set_default_timeout(20_000)
        contexts.append(context)
        page = context.new_page()
        if username:
            login(page, username)
        return page

    yield make
    for context in contexts:
        context.close()


def login(page: object, username: str) -> None:
    page.goto("/accounts/login/")  # type: ignore[attr-defined]
    page.get_by_label("Username").fill(username)  # type: ignore[attr-defined]
    page.get_by_label("Password").fill(PASSWORD)  # type: ignore[attr-defined]
    page.get_by_role("button", name="Log in").click()  # type: ignore[attr-defined]
    page.wait_for_url("**/")  # type: ignore[attr-defined]


def shot(page: object, name: str, *, full_page: bool = True) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)  # type: ignore[attr-defined]
    return path


def run_id(server: Server, graph: str, *, label: str | None = None) -> str:
    """The id of the demo project's primary run of ``graph``."""
    import json

    runs = json.loads(server.manage("runs", "--json"))
    for run in runs:
        if run["graph"] == graph and run["run_kind"] == "primary" and (
                label is None or run["label"] == label):
            return str(run["id"])
    raise LookupError(f"no primary run of {graph}")
