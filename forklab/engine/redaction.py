"""Redaction of action records (SPEC §1: requests and tool calls are recorded "after
redaction").

A :class:`Redactor` returns a copy of a JSON value with secrets replaced by placeholders:

- the whole value under a key whose name looks secret (``api_key``, ``Authorization``,
  ``password``, ``access_token``, ``client_secret`` …) — names are compared word by word,
  so ``authToken`` and ``x-api-key`` match ``token`` and ``api_key`` while ``max_tokens``
  does not match ``token``;
- the secret part of a string matching a value pattern (a bearer token, an ``sk-…`` key, an
  AWS access key id, a GitHub or Slack token, a JWT, a PEM private key);
- whatever a caller-supplied mask changes in a string; a mask that raises fails closed: the
  string becomes ``[redacted: mask failed]``.

Placeholders are numbered per call in order of first appearance: ``[REDACTED]#1`` for the
first distinct secret, ``#2`` for the next, the same number wherever one secret repeats — so
a reader can still tell that two fields held the same value.

Invariants (``tests/engine/test_redaction.py``): ``redact`` is pure and deterministic (the
same input gives the same output, which strict replay relies on), never mutates its input,
keeps the value's shape (same keys, same list lengths, non-secret leaves untouched), and is
idempotent. Matching is unaffected by redaction: the engine computes ``request_hash`` and
``args_hash`` from the unredacted values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.canonical import canonical_json

PLACEHOLDER = "[REDACTED]"
MASK_FAILED = "[redacted: mask failed]"
PLACEHOLDER_PATTERN = re.compile(r"\[REDACTED\](?:#\d+)?|\[redacted: mask failed\]")

DEFAULT_KEYS: tuple[str, ...] = (
    "api_key", "apikey", "authorization", "proxy_authorization", "password", "passwd",
    "passphrase", "secret", "token", "private_key", "cookie", "set_cookie", "session_id",
    "credentials",
)
"""Key names whose values are always secret (compared word by word, see ``key_words``)."""

DEFAULT_VALUE_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    r"(?i)(?<=\bbearer\s)[A-Za-z0-9\-._~+/]{8,}=*",  # the token after "Bearer "
    r"(?i)(?<=\bbasic\s)[A-Za-z0-9+/]{8,}=*",  # HTTP basic credentials
    r"\bsk-[A-Za-z0-9_\-]{16,}",  # OpenAI / Anthropic style keys (sk-…, sk-proj-…, sk-ant-…)
    r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key id
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",  # GitHub tokens
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JWT
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
))
"""Secrets recognised by their shape wherever they appear in a string."""

Mask = Callable[[str], str]

SECRET_KEY_CACHE = 4096
"""Key names whose secrecy a redactor remembers (bounded: names may come from user data)."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")


def key_words(name: str) -> tuple[str, ...]:
    """``"X-Api-Key"`` → ``("x", "api", "key")``; ``"authToken"`` → ``("auth", "token")``."""
    spaced = _CAMEL.sub("_", name)
    return tuple(w.lower() for w in _SEPARATORS.split(spaced) if w)


def _contains(words: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    n = len(pattern)
    return any(words[i:i + n] == pattern for i in range(len(words) - n + 1))


def _delimited(words: tuple[str, ...]) -> str:
    """``("x", "api", "key")`` → ``"_x_api_key_"``: words never hold ``_`` (it separates
    them), so ``_contains(words, p)`` ⇔ ``_delimited(p) in _delimited(words)`` for
    non-empty ``p`` — one substring test per pattern instead of a scan of word slices."""
    return "_" + "_".join(words) + "_"


class _Numbering:
    """Placeholder numbers for one redaction call: one per distinct secret."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def placeholder(self, secret: Any) -> str:
        key = secret if isinstance(secret, str) else canonical_json(secret)
        number = self.numbers.setdefault(key, len(self.numbers) + 1)
        return f"{PLACEHOLDER}#{number}"


@dataclass(frozen=True)
class Redactor:
    """What counts as secret; ``redact`` applies it. Immutable and safe to share."""

    keys: tuple[str, ...] = DEFAULT_KEYS
    values: tuple[re.Pattern[str], ...] = DEFAULT_VALUE_PATTERNS
    masks: tuple[Mask, ...] = ()
    _key_words: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)
    _key_texts: tuple[str, ...] = field(init=False, repr=False, compare=False)  # _delimited
    # secret_key's answers by key name: a pure function of the name and ``keys``, asked for
    # the same few names (role, content, params' keys) on every recorded call
    _secret: dict[str, bool] = field(init=False, repr=False, compare=False)
    # with the default value patterns: a test every string they could match passes (most
    # strings fail it, in well under a microsecond, and skip the 8 substitutions); None for
    # other patterns (each is substituted)
    _hints: Callable[[str], bool] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        words = tuple(w for w in (key_words(k) for k in self.keys) if w)
        object.__setattr__(self, "_key_words", words)
        object.__setattr__(self, "_key_texts", tuple(_delimited(w) for w in words))
        object.__setattr__(self, "_secret", {})
        object.__setattr__(self, "_hints", _default_hints
                           if self.values == DEFAULT_VALUE_PATTERNS else None)

    def with_keys(self, extra: Iterable[str]) -> Redactor:
        """This redactor with more secret key names (e.g. from settings)."""
        added = tuple(k for k in extra if k.strip() and k not in self.keys)
        return Redactor(keys=self.keys + added, values=self.values, masks=self.masks)

    def secret_key(self, name: str) -> bool:
        known = self._secret.get(name)
        if known is None:  # a new name (a graph of 10,000 nodes may have 10,000 keys)
            text = _delimited(key_words(name))
            known = any(pattern in text for pattern in self._key_texts)
            if len(self._secret) < SECRET_KEY_CACHE:
                self._secret[name] = known  # one dict store: safe from any thread
        return known

    def redact(self, value: Any) -> Any:
        """A redacted copy of the JSON value ``value`` (see the module docstring)."""
        return self._value(value, _Numbering())

    def redact_fields(self, **fields: Any) -> dict[str, Any]:
        """Several fields of one record redacted together (one numbering for all)."""
        return dict(self._value(fields, _Numbering()))

    def _value(self, value: Any, numbering: _Numbering) -> Any:
        kind = type(value)  # the exact JSON types first: an ABC isinstance check is slower
        if kind is str or (kind is not dict and isinstance(value, str)):
            return self._string(value, numbering)
        if kind is dict or (kind is not list and isinstance(value, Mapping)):
            return {k: self._entry(str(k), v, numbering) for k, v in value.items()}
        if kind is list or isinstance(value, (list, tuple)):
            return [self._value(v, numbering) for v in value]
        return value

    def _entry(self, key: str, value: Any, numbering: _Numbering) -> Any:
        if not self.secret_key(key):  # most keys (a remembered answer)
            return self._value(value, numbering)
        empty = value is None or isinstance(value, bool) or value in ("", [], {})
        if empty or _is_placeholder(value):
            return self._value(value, numbering)
        return numbering.placeholder(value)

    def _string(self, text: str, numbering: _Numbering) -> str:
        if _is_placeholder(text):
            return text
        # when no pattern can match the text, no substitution changes it (nor, then, the next)
        if self._hints is None or self._hints(text):
            for pattern in self.values:
                text = pattern.sub(lambda m: _keep_placeholders(m.group(0), numbering), text)
        for mask in self.masks:
            try:
                text = mask(text)
            except Exception:  # a broken mask must not leak what it failed to mask
                return MASK_FAILED
            if not isinstance(text, str):
                return MASK_FAILED
        return text


_GITHUB_HINT = re.compile(r"gh[pousr]_")


def _default_hints(text: str) -> bool:
    """False only when no pattern of ``DEFAULT_VALUE_PATTERNS`` can match ``text``: each
    needs its literal ("bearer" / "basic" in any case, "sk-", "AKIA", "gh?_", "xox", "eyJ",
    "-----BEGIN "). Non-ASCII text always passes: case-insensitive matching folds some
    non-ASCII letters onto ASCII ones (the long s, U+017F, matches ``s``), which ``lower`` does not."""
    if not text.isascii():
        return True
    low = text.lower()
    return ("bearer" in low or "basic" in low or "sk-" in text or "AKIA" in text
            or "eyJ" in text or "xox" in text or "-----BEGIN " in text
            or _GITHUB_HINT.search(text) is not None)


def _keep_placeholders(secret: str, numbering: _Numbering) -> str:
    return secret if PLACEHOLDER_PATTERN.fullmatch(secret) else numbering.placeholder(secret)


def _is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("[") \
        and PLACEHOLDER_PATTERN.fullmatch(value) is not None


def contains_placeholder(value: Any) -> bool:
    """True when any string in ``value`` (keys included) holds a redaction placeholder."""
    if isinstance(value, str):
        return PLACEHOLDER_PATTERN.search(value) is not None
    if isinstance(value, Mapping):
        return any(contains_placeholder(k) or contains_placeholder(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(contains_placeholder(v) for v in value)
    return False


NO_REDACTION = Redactor(keys=(), values=(), masks=())
"""A redactor that changes nothing (tests that need raw records)."""
