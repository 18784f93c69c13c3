"""HTTP for the vendor providers: one POST of JSON, retried, decided in one place.

``should_retry`` and ``retry_delay`` are the whole retry policy (after openai-python's
``_should_retry`` / ``_calculate_retry_timeout``):

- retried: no answer at all (a refused or dropped connection, a timeout) and the statuses
  408, 409, 429 and 5xx — at most ``max_retries`` times (default 3: four attempts);
  a server's ``x-should-retry: true|false`` header overrides the status;
- never retried: every other status (400, 401, 403, 404, 422, …) — it fails at once;
- the delay before retry *n* (0-based) is *full jitter* over an exponential ceiling:
  ``uniform(0, min(initial * 2**n, max_delay))``, unless the server said how long to wait
  (``retry-after-ms``, else ``Retry-After`` in seconds or as an HTTP date), which is honoured
  up to ``max_retry_after_s``.

``JsonPoster.post`` returns the successful answer's body with every attempt made
(:class:`Attempt`, the delay waited recorded on the attempt it followed), or raises
``ProviderError`` (an HTTP error status, carrying the vendor's own message; a connection
that was refused says "is the server running?", nothing else does) or ``ProviderTimeout``
(every attempt timed out: names the URL and the limit). ``sleep``, ``random`` and ``now``
are injected so tests neither wait nor depend on chance.
"""

from __future__ import annotations

import json
import math
import random as _random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from forklab.engine.errors import ProviderError, ProviderTimeout
from forklab.engine.providers.base import Attempt

if TYPE_CHECKING:
    import httpx

RETRYABLE_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How often and how long to retry (see the module docstring)."""

    max_retries: int = 3
    initial_delay_s: float = 0.5
    max_delay_s: float = 8.0
    max_retry_after_s: float = 60.0


def should_retry(status: int | None, headers: Mapping[str, str] | None = None) -> bool:
    """Whether an attempt that ended with ``status`` (None: no HTTP answer) is retried."""
    if status is None:
        return True
    verdict = (headers or {}).get("x-should-retry", "").lower()
    if verdict in ("true", "false"):
        return verdict == "true"
    return status in RETRYABLE_STATUSES or status >= 500


def server_delay_s(headers: Mapping[str, str], *, now: Callable[[], float] = time.time,
                   ) -> float | None:
    """The wait the server asked for: ``retry-after-ms`` (milliseconds), else
    ``Retry-After`` (seconds, or an HTTP date); None when absent or unreadable. Never
    negative (a date in the past is 0)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        seconds = _number(raw_ms)
        if seconds is not None:
            return max(0.0, seconds / 1000)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now())


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def retry_delay(retries_done: int, policy: RetryPolicy, *, server_delay: float | None,
                random: Callable[[], float]) -> float:
    """Seconds to wait before the next attempt, after ``retries_done`` retries: the server's
    own delay capped at ``max_retry_after_s``, else full jitter — ``random()`` (in [0, 1))
    times ``min(initial_delay_s * 2**retries_done, max_delay_s)``."""
    if server_delay is not None:
        return min(server_delay, policy.max_retry_after_s)
    ceiling = min(policy.initial_delay_s * 2.0 ** min(retries_done, 64), policy.max_delay_s)
    return ceiling * random()


def vendor_message(text: str) -> str | None:
    """The vendor's own error text from an error body: OpenAI's
    ``{"error": {"message"}}``, Anthropic's ``{"type": "error", "error": {"type",
    "message"}}`` (given as ``type: message``), or a bare ``{"error": "…"}``; None when
    the body says nothing readable."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, str):
        return error
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    kind = error.get("type")
    if data.get("type") == "error" and isinstance(kind, str):
        return f"{kind}: {error['message']}"
    return str(error["message"])


def _refused(exc: BaseException) -> bool:
    """True when the connection was refused (nothing listens there), looking through the
    exceptions httpx and httpcore wrap around the socket's own."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(frozen=True, slots=True)
class _Failure:
    status: int | None
    error: str
    headers: Mapping[str, str]
    body: str = ""
    timed_out: bool = False
    refused: bool = False


class JsonPoster:
    """POSTs JSON to a vendor with the retry policy; one per provider instance."""

    def __init__(self, *, client: httpx.Client, timeout_s: float, policy: RetryPolicy,
                 sleep: Callable[[float], None] = time.sleep,
                 random: Callable[[], float] = _random.random,
                 now: Callable[[], float] = time.time) -> None:
        self.client, self.timeout_s, self.policy = client, timeout_s, policy
        self._sleep, self._random, self._now = sleep, random, now

    def post(self, url: str, body: dict[str, Any], headers: Mapping[str, str] | None = None,
             ) -> tuple[str, tuple[Attempt, ...]]:
        """The body text of the first successful (status < 400) answer and every attempt
        made; raises as the module docstring says."""
        attempts: list[Attempt] = []
        while True:
            started = time.perf_counter()
            outcome = self._once(url, body, headers)
            latency = round((time.perf_counter() - started) * 1000, 3)
            if not isinstance(outcome, _Failure):
                attempts.append(Attempt(status=outcome[0], error=None, latency_ms=latency))
                return outcome[1], tuple(attempts)
            retries_done = len(attempts)
            if retries_done < self.policy.max_retries and should_retry(outcome.status,
                                                                       outcome.headers):
                delay = retry_delay(retries_done, self.policy, random=self._random,
                                    server_delay=server_delay_s(outcome.headers, now=self._now))
                attempts.append(Attempt(status=outcome.status, error=outcome.error,
                                        latency_ms=latency, retry_after_s=round(delay, 6)))
                self._sleep(delay)
                continue
            attempts.append(Attempt(status=outcome.status, error=outcome.error,
                                    latency_ms=latency))
            raise self._error(url, outcome, tuple(attempts))

    def _once(self, url: str, body: dict[str, Any], headers: Mapping[str, str] | None,
              ) -> tuple[int, str] | _Failure:
        import httpx  # loaded with the provider already: a dictionary lookup

        try:
            response = self.client.post(url, json=body, headers=dict(headers or {}),
                                        timeout=self.timeout_s)
        except httpx.TimeoutException:
            return _Failure(None, f"timed out after {self.timeout_s:g} s", {}, timed_out=True)
        except httpx.HTTPError as exc:
            return _Failure(None, f"{type(exc).__name__}: {exc}"[:300], {},
                            refused=_refused(exc))
        if response.status_code >= 400:
            text = response.text
            short = vendor_message(text) or text[:300]
            return _Failure(response.status_code, f"HTTP {response.status_code}: {short}"[:300],
                            response.headers, body=text)
        return response.status_code, response.text

    def _error(self, url: str, failure: _Failure, attempts: tuple[Attempt, ...],
               ) -> ProviderError | ProviderTimeout:
        wire = [attempt.to_wire() for attempt in attempts]
        tries = f" ({len(attempts)} attempts)" if len(attempts) > 1 else ""
        if failure.timed_out:
            return ProviderTimeout(
                f"{url} did not answer within the {self.timeout_s:g} s limit{tries}; raise "
                "the provider's timeout (FORKLAB_*_TIMEOUT_S) or check the server's load",
                url=url, timeout_s=self.timeout_s, attempts=wire)
        if failure.status is None:
            hint = "; is the server running?" if failure.refused else ""
            return ProviderError(f"cannot reach {url}: {failure.error}{tries}{hint}",
                                 url=url, status=None, provider_message=None, attempts=wire)
        said = vendor_message(failure.body)
        return ProviderError(
            f"{url} answered HTTP {failure.status}{tries}: {said or failure.body[:300]}",
            url=url, status=failure.status, provider_message=said, attempts=wire)


def malformed(url: str, expected: str, text: str, attempts: tuple[Attempt, ...],
              ) -> ProviderError:
    """The error for a successful answer whose body is not what the vendor's API returns."""
    return ProviderError(f"{url} returned a body without {expected}: {text[:300]}", url=url,
                         status=200, provider_message=None,
                         attempts=[attempt.to_wire() for attempt in attempts])
