"""Static files with content-hashed names, served by WhiteNoise (no stale JS/CSS after a
deploy: a changed file gets a new name, and far-future caching is safe).

``collectstatic`` (``./dev start`` runs it) writes the hashed, compressed copies and their
manifest into ``STATIC_ROOT``. Before it has run (a fresh checkout, the test suite) a name the
manifest lacks is served under its own name instead of failing the page.
"""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


# whitenoise ships no type hints
class HashedStaticFiles(CompressedManifestStaticFilesStorage):  # type: ignore[misc]
    manifest_strict = False

    def stored_name(self, name: str) -> str:
        try:
            return str(super().stored_name(name))
        except ValueError:  # not collected yet: the file as the finders serve it
            return name
