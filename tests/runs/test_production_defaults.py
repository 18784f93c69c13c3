"""Production defaults: debug is off unless asked for, a secret key exists without being
committed anywhere, HTTPS settings and the /metrics restriction come from the environment."""

from __future__ import annotations

import json
import os
import runpy
import stat
from pathlib import Path

import pytest
from django.conf import global_settings
from django.test import Client, override_settings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_FILE = ROOT / "forklab" / "settings.py"
SHOWN = ("DEBUG", "SECRET_KEY", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
         "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_SSL_REDIRECT",
         "SECURE_PROXY_SSL_HEADER", "CSRF_TRUSTED_ORIGINS", "FORKLAB_METRICS_ALLOW")


def settings_with(tmp_path: Path, **env: str) -> dict[str, object]:
    """The settings a fresh start gets under this environment (no ``FORKLAB_`` variable but
    ``env``, the var dir ``tmp_path``): ``forklab/settings.py`` executed anew, as a new
    process does, with Django's defaults for what it leaves unset.

    In-process rather than a ``python -c`` child per start (six children cost ~40 s of the
    main session on a loaded machine); the module reads only ``os.environ`` and the var dir.
    """
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({k: v for k, v in saved.items() if not k.startswith("FORKLAB_")})
    os.environ.update({"FORKLAB_VAR_DIR": str(tmp_path), **env})
    try:
        fresh = runpy.run_path(str(SETTINGS_FILE), run_name="forklab_settings_fresh_start")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    shown = {k: fresh[k] if k in fresh else getattr(global_settings, k, None) for k in SHOWN}
    return dict(json.loads(json.dumps(shown)))  # as JSON: tuples read as lists


def test_debug_is_off_unless_asked_for_and_the_key_is_generated_once(tmp_path: Path) -> None:
    first = settings_with(tmp_path)
    assert first["DEBUG"] is False
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert first["SECRET_KEY"] == key_file.read_text() and len(str(first["SECRET_KEY"])) > 40
    assert settings_with(tmp_path)["SECRET_KEY"] == first["SECRET_KEY"]  # kept across starts
    assert settings_with(tmp_path, FORKLAB_DEBUG="1")["DEBUG"] is True
    assert settings_with(tmp_path, FORKLAB_SECRET_KEY="given")["SECRET_KEY"] == "given"


def test_https_settings_come_from_the_environment(tmp_path: Path) -> None:
    defaults = settings_with(tmp_path)
    assert (defaults["SESSION_COOKIE_SECURE"], defaults["SECURE_HSTS_SECONDS"],
            defaults["SECURE_PROXY_SSL_HEADER"]) == (False, 0, None)
    https = settings_with(
        tmp_path, FORKLAB_SECURE_COOKIES="1", FORKLAB_HSTS_SECONDS="31536000",
        FORKLAB_HSTS_INCLUDE_SUBDOMAINS="1", FORKLAB_SSL_REDIRECT="1",
        FORKLAB_BEHIND_HTTPS_PROXY="1", FORKLAB_CSRF_TRUSTED_ORIGINS="https://forklab.example")
    assert https == {**https, "SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True,
                     "SECURE_HSTS_SECONDS": 31536000, "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
                     "SECURE_SSL_REDIRECT": True,
                     "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
                     "CSRF_TRUSTED_ORIGINS": ["https://forklab.example"]}


def test_dev_start_asks_for_debug() -> None:
    assert 'export FORKLAB_DEBUG="${FORKLAB_DEBUG:-1}"' in (ROOT / "dev").read_text()


@pytest.mark.django_db
@pytest.mark.parametrize("allow, address, status", [
    (["127.0.0.1", "::1"], "127.0.0.1", 200),
    (["127.0.0.1", "::1"], "203.0.113.9", 403),
    (["10.0.0.0/8"], "10.1.2.3", 200),
    (["10.0.0.0/8"], "192.168.1.1", 403),
    (["*"], "203.0.113.9", 200),
])
def test_metrics_are_readable_only_from_the_allow_list(allow: list[str], address: str,
                                                       status: int) -> None:
    with override_settings(FORKLAB_METRICS_ALLOW=allow, FORKLAB_METRICS_TOKEN=""):
        assert Client(REMOTE_ADDR=address).get("/metrics").status_code == status


@pytest.mark.django_db
def test_a_metrics_token_replaces_the_allow_list() -> None:
    with override_settings(FORKLAB_METRICS_TOKEN="s3cret", FORKLAB_METRICS_ALLOW=[]):
        far = Client(REMOTE_ADDR="203.0.113.9")
        assert far.get("/metrics").status_code == 401
        assert far.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200
