"""Client-side limits on the operator's own Kubernetes API requests: a token bucket (QPS and
burst, as client-go's ``rest.Config.QPS``/``Burst``), which statuses are retried and how long to
wait, and the parsing of ``Retry-After``. Pure: a clock and a sleep can be given, nothing here
reads settings or talks to a server (``controller/k8s.py`` wires it into the client)."""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: the first wait of a 429 that carries no Retry-After (seconds); it doubles per retry
BACKOFF_BASE_SECONDS = 0.5


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved up; one token per request.

    :meth:`acquire` reserves a token at once, under the lock, and sleeps outside it until the
    token is due, so concurrent callers are served in the order they asked, and a caller that
    finds the bucket empty waits ``1/qps`` behind the one before it (the bucket's balance may go
    below zero: those are reservations not yet due)."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not qps > 0:
            raise ValueError(f"qps must be > 0, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)  # a fresh client may send its burst at once
        self._last = clock()

    def reserve(self) -> float:
        """Take one token; the seconds until it is due (0: now). Never sleeps."""
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._last)
            self._last = now
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_take(self) -> bool:
        """Take one token if one is there now (True), else take nothing (False). Never sleeps,
        never reserves: for what is dropped, not delayed, past the rate (Events)."""
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._last)
            self._last = now
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def acquire(self) -> float:
        """Take one token, sleeping until it is due; returns the seconds waited."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        return wait


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which responses are sent again, how often and after how long (client-go's rule: a 429 is
    retried; a 5xx only when the server said when, with Retry-After)."""

    #: retries of one request (0: never retried)
    max_retries: int = 10
    #: the longest single wait (seconds): a larger Retry-After is cut to it
    max_wait_seconds: float = 60.0
    #: the first wait of a 429 without Retry-After; doubled per retry (capped as above)
    backoff_base_seconds: float = BACKOFF_BASE_SECONDS

    def wait(self, status: int, headers: Any, retries_done: int) -> float | None:
        """Seconds to wait before sending the request again, or None: do not retry (not a
        retried status, or ``retries_done`` already at :attr:`max_retries`)."""
        if retries_done >= self.max_retries:
            return None
        after = retry_after_seconds(headers)
        if status == 429:
            wait = (
                after
                if after is not None
                else self.backoff_base_seconds * 2.0 ** min(retries_done, 30)
            )
        elif 500 <= status <= 599 and after is not None:
            wait = after
        else:
            return None
        return min(wait, self.max_wait_seconds)


def retry_after_seconds(headers: Any, now: float | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds (RFC 9110 §10.2.3: delta-seconds,
    or an HTTP-date, then counted from ``now``, epoch seconds, default the current time; a date
    in the past is 0). None when absent or not one of those forms."""
    raw = _header(headers, "Retry-After")
    if raw is None:
        return None
    text = raw.strip()
    if text.isascii() and text.isdigit():
        return float(int(text))
    if not text or text[0].isdigit() or text[0] in "+-.":
        return None  # "1.5", "-1", "10s": not delta-seconds, and no date starts so
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110: an HTTP-date is GMT; "-0000" parses as naive
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _header(headers: Any, name: str) -> str | None:
    """A header's value from urllib3's case-insensitive headers or any mapping (any case)."""
    if headers is None:
        return None
    getter = getattr(headers, "get", None)
    value = getter(name) if getter is not None else None
    if value is None and isinstance(headers, Mapping):
        lower = name.lower()
        value = next((v for k, v in headers.items() if str(k).lower() == lower), None)
    return None if value is None else str(value)
