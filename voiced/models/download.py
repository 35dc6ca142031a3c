"""Resumable HTTP downloads with checksums, stdlib only (urllib).

A download goes to ``DEST.part``; an interrupted one is resumed with an HTTP ``Range``
request (from a retry in the same call, or from the next ``voiced models pull``). A server
that ignores ``Range`` (200 instead of 206) gets the file from the start. When the whole
file is there its sha256 (and size) is checked: a mismatch deletes the partial file and
raises :class:`ModelError` naming the URL and both checksums; only a match is renamed to DEST.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import TextIO

from voiced import __version__
from voiced.errors import ConfigError, ModelError
from voiced.models.manifest import sha256_file
from voiced.runtime.backoff import Backoff, BackoffPolicy

__all__ = ["DownloadOptions", "download"]

log = logging.getLogger(__name__)

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class DownloadOptions:
    """How downloads behave."""

    timeout: float = 30.0
    """Seconds without progress before a connection counts as failed."""
    retries: int = 3
    """Further attempts after a failed one, each resuming where the file stopped."""
    block: int = 64 * 1024
    """Bytes read per socket read."""
    progress: bool = True
    """Progress bar on stderr (a line every 10% when stderr is not a terminal)."""
    backoff: BackoffPolicy = field(default_factory=lambda: BackoffPolicy(initial=1.0, maximum=30.0))
    """Delay between attempts."""

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ConfigError("timeout", f"must be > 0, got {self.timeout}")
        if self.retries < 0:
            raise ConfigError("retries", f"must be >= 0, got {self.retries}")
        if self.block < 1024:
            raise ConfigError("block", f"must be at least 1024, got {self.block}")


class _Retry(Exception):
    """A failure worth another attempt (connection lost, timeout, 5xx)."""


def download(url: str, dest: str | Path, *, sha256: str | None, size: int | None = None,
             options: DownloadOptions | None = None, stop: threading.Event | None = None) -> str:
    """Fetch ``url`` into ``dest`` (resuming ``dest.part``); returns the sha256 of the file.

    ``sha256=None`` skips the check (the caller decided to trust the source) but the
    checksum is still returned so it can be recorded.
    """
    options = options or DownloadOptions()
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    backoff = Backoff(options.backoff)
    attempt = 0
    while True:
        try:
            _fetch(url, part, options, size)
            break
        except _Retry as exc:
            if attempt >= options.retries:
                have = part.stat().st_size if part.exists() else 0
                raise ModelError(
                    f"download of {url} failed after {attempt + 1} attempt(s): {exc}; {have} bytes kept in {part},"
                    " run the command again to resume"
                ) from None
            attempt += 1
            log.warning("download of %s interrupted (%s); resuming (attempt %d of %d)", url, exc, attempt + 1,
                        options.retries + 1)
            if not backoff.wait(stop):
                raise ModelError(f"download of {url} stopped; partial file kept in {part}") from None
    actual = sha256_file(part)
    got = part.stat().st_size
    if (sha256 and actual != sha256.lower()) or (size is not None and got != size):
        part.unlink(missing_ok=True)
        expected = f"sha256 {sha256}" + (f", {size} bytes" if size is not None else "")
        raise ModelError(
            f"download of {url}: got sha256 {actual} ({got} bytes), expected {expected};"
            " the file is corrupt or not the one pinned: removed it"
        )
    os.replace(part, dest)
    return actual


def _fetch(url: str, part: Path, options: DownloadOptions, size: int | None) -> None:
    """One attempt: continue ``part`` from its current length to the end of the resource."""
    have = part.stat().st_size if part.exists() else 0
    if size is not None and have == size:
        return  # complete from an earlier run; the checksum decides
    headers = {"User-Agent": f"voiced/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=options.timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:
            # Range not satisfiable: the part is already whole (or longer than the file); check or restart.
            total = _total_from(exc.headers.get("Content-Range", ""))
            if total is not None and total == have:
                return
            part.unlink(missing_ok=True)
            raise _Retry(f"server refused to resume at byte {have}; starting over") from None
        if exc.code >= 500 or exc.code == 429:
            raise _Retry(f"HTTP {exc.code} {exc.reason}") from None
        raise ModelError(f"download of {url} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(exc, urllib.error.URLError) and not isinstance(reason, (OSError, TimeoutError)):
            raise ModelError(f"download of {url} failed: {reason}") from None
        raise _Retry(str(reason)) from None
    with response:
        status = getattr(response, "status", 200)
        if have and status == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != have:
                part.unlink(missing_ok=True)
                raise _Retry(f"server answered Range {have}- with {response.headers.get('Content-Range')!r}; starting over")
            mode, start = "ab", have
        else:
            mode, start = "wb", 0  # 200: the server sends the whole file
        length = response.headers.get("Content-Length")
        total = start + int(length) if length and length.isdigit() else size
        bar = _Bar(url.rsplit("/", 1)[-1], total, start, options.progress)
        done = start
        try:
            with open(part, mode) as f:
                while True:
                    try:
                        chunk = response.read(options.block)
                    except (TimeoutError, ConnectionError, HTTPException, OSError) as exc:
                        raise _Retry(f"connection lost after {done} bytes: {exc or type(exc).__name__}") from None
                    if not chunk:
                        break
                    f.write(chunk)
                    done += len(chunk)
                    bar.update(done)
        finally:
            bar.close()
        if total is not None and done < total:
            raise _Retry(f"connection closed after {done} of {total} bytes")


def _total_from(content_range: str) -> int | None:
    m = re.match(r"bytes\s+\*/(\d+)", content_range)
    return int(m.group(1)) if m else None


class _Bar:
    """``name  45%  12.3/27.0 MB  1.2 MB/s`` on stderr."""

    def __init__(self, name: str, total: int | None, start: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.name, self.total, self.enabled = name, total, enabled
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start_bytes, self.t0 = start, time.monotonic()
        self._last_draw, self._last_decile = 0.0, -1
        if enabled and start:
            print(f"{name}: resuming at {start / 1e6:.1f} MB", file=self.stream, flush=True)

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        pct = 100 * done / self.total if self.total else None
        if self.tty:
            if now - self._last_draw >= 0.1:
                self._last_draw = now
                self._draw(done, pct, now, end="\r")
        elif pct is not None and int(pct // 10) > self._last_decile:
            self._last_decile = int(pct // 10)
            self._draw(done, pct, now, end="\n")

    def _draw(self, done: int, pct: float | None, now: float, end: str) -> None:
        rate = (done - self.start_bytes) / max(now - self.t0, 1e-6) / 1e6
        total = f"/{self.total / 1e6:.1f}" if self.total else ""
        pct_s = f"{pct:5.1f}% " if pct is not None else ""
        width = 24
        bar = ""
        if pct is not None and self.tty:
            filled = int(width * pct / 100)
            bar = "[" + "#" * filled + "." * (width - filled) + "] "
        print(f"{self.name}  {bar}{pct_s}{done / 1e6:.1f}{total} MB  {rate:.1f} MB/s", end=end, file=self.stream, flush=True)

    def close(self) -> None:
        if self.enabled and self.tty:
            print(file=self.stream, flush=True)
