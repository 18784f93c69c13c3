"""The install smoke test: forklab as a new user meets it (``./dev test`` runs it last).

Builds the wheel, installs it into a fresh virtualenv in a temporary directory outside the
checkout (dependencies from whatever package index pip is configured with), then, as a user
whose home directory is another temporary directory and who sets no FORKLAB_ variable:
``forklab serve --demo`` on a free port; waits for /healthz; logs in as demo/demo; loads the
home page, a run page and a static file (200 each); records a run and forks it with the
installed ``forklab`` command; stops the server; checks nothing was written into the
installed package. Prints each check; exits non-zero at the first that fails.

    python -m tests.install.smoke          (from the checkout's root)
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.install.wheel import build_wheel

START_TIMEOUT_S = 180  # migrate + collectstatic + recording the demo runs, on a loaded host


def check(what: str, ok: bool, detail: str = "") -> None:
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        raise SystemExit(f"smoke: {what} failed{': ' + detail if detail else ''}")


def step(what: str) -> None:
    print(f"smoke: {what}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def user_env(home: Path) -> dict[str, str]:
    """A new user's environment: their own home, no forklab or Django variable set."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "PIP_", "SSL_CERT", "REQUESTS_CA_BUNDLE")
    env = {k: v for k, v in os.environ.items() if k.startswith(keep)}
    return {**env, "HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1"}


def install(tmp: Path) -> Path:
    step("building the wheel and installing it into a fresh virtualenv")
    wheel = build_wheel(tmp / "dist")
    venv = tmp / "venv"
    # no PYTHONPATH (this checkout's forklab must not satisfy the requirement)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", str(wheel)],
                          env=env, cwd=tmp, capture_output=True, text=True)
    check(f"pip install {wheel.name}",
          done.returncode == 0 and (venv / "bin" / "forklab").exists(), done.stderr[-3000:])
    return venv


def package_files(venv: Path) -> set[str]:
    found = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import forklab, pathlib; print(pathlib.Path(forklab.__file__).parent)"],
                           check=True, capture_output=True, text=True, cwd=venv.parent)
    package = Path(found.stdout.strip())
    return {str(p.relative_to(package)) for p in package.rglob("*")
            if "__pycache__" not in p.parts}


def forklab(venv: Path, env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run([str(venv / "bin" / "forklab"), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    check(f"forklab {' '.join(args)}", done.returncode == 0, done.stderr.strip()[-2000:])
    return done.stdout


class Browser:
    """A cookie-keeping HTTP client (enough for Django's session and CSRF cookies)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=30) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(self.base + path, data=data,
                                         headers={"Referer": self.base + path})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")

    def cookie(self, name: str) -> str:
        return next((c.value or "" for c in self.jar if c.name == name), "")


def wait_healthy(browser: Browser, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        check_alive = server.poll()
        if check_alive is not None:
            check("forklab serve stays up", False, f"exited with status {check_alive}")
        try:
            status, body = browser.get("/healthz")
            if status == 200:
                check(f"GET /healthz: {body.strip()}", json.loads(body)["status"] == "ok")
                return
        except OSError:
            pass
        time.sleep(0.5)
    check(f"/healthz answers within {START_TIMEOUT_S} s", False)


def browse(browser: Browser) -> None:
    status, page = browser.get("/accounts/login/")
    check("GET /accounts/login/ is 200 and names the demo login",
          status == 200 and "<strong>demo</strong> / <strong>demo</strong>" in page)
    status, home = browser.post("/accounts/login/", {
        "username": "demo", "password": "demo", "next": "/",
        "csrfmiddlewaretoken": browser.cookie("csrftoken")})
    check("log in as demo / demo lands on the home page (200)",
          status == 200 and 'action="/accounts/logout/"' in home, home[:500])
    run = re.search(r'href="(/runs/[0-9a-f]{32}/)"', home)
    check("the home page lists the demo runs", run is not None)
    assert run is not None
    status, _ = browser.get(run.group(1))
    check(f"GET {run.group(1)} (a run page) is 200", status == 200)
    css = re.search(r'href="(/static/forklab\.[0-9a-f]{12}\.css)"', home)
    check("the page links the content-hashed stylesheet", css is not None)
    assert css is not None
    status, body = browser.get(css.group(1))
    check(f"GET {css.group(1)} is 200", status == 200 and "--bad" in body)
    status, body = browser.get("/no-such-page/")
    check("an unknown page is forklab's own 404 page", status == 404 and "Nothing here" in body)


def main() -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="forklab-smoke-") as tmp_name:
        tmp = Path(tmp_name)
        venv = install(tmp)
        home, cwd = tmp / "home", tmp / "elsewhere"
        home.mkdir()
        cwd.mkdir()
        env = user_env(home)
        before = package_files(venv)
        print(forklab(venv, env, cwd, "--version").strip())
        usage = forklab(venv, env, cwd, "--help")
        check("forklab --help lists the verbs",
              all(f"\n  {verb} " in usage for verb in ("serve", "record", "fork", "worker")))
        port = free_port()
        step(f"forklab serve --demo --port {port}")
        log = (tmp / "serve.log").open("wb")
        server = subprocess.Popen([str(venv / "bin" / "forklab"), "serve", "--demo",
                                   "--port", str(port)], env=env, cwd=cwd, stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            browser = Browser(f"http://127.0.0.1:{port}")
            wait_healthy(browser, server)
            browse(browser)
            step("recording a run and forking it with the installed command")
            run_id = forklab(venv, env, cwd, "record", "research-write").strip()
            check(f"record printed a run id ({run_id})", re.fullmatch(r"[0-9a-f]{32}", run_id)
                  is not None)
            fork = json.loads(forklab(venv, env, cwd, "fork", run_id, "--at", "before:write",
                                      "--prompt", "write=Answer in three bullets.", "--json"))
            check(f"the fork finished ({fork.get('status')})", fork.get("status") == "completed")
            status, _ = browser.get(f"/runs/{run_id}/")
            check("the served dashboard shows the recorded run (200)", status == 200)
        except BaseException:
            log.flush()
            print((tmp / "serve.log").read_text(errors="replace")[-4000:], file=sys.stderr)
            raise
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log.close()
        step("where the data went")
        data = home / ".local" / "share" / "forklab"
        check(f"the database is in the user's data directory ({data})",
              (data / "forklab.sqlite3").exists() and (data / "static").is_dir())
        written = package_files(venv) - before
        check("nothing was written into the installed package", not written, str(written))
    print(f"smoke: all checks passed in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
