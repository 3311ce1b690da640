"""The resolver plugin's on-disk adapter cache: one folder per manifest digest.

Several engine processes may share one cache directory (a node's hostPath, or every
engine of ``mol up``), so every step is safe across processes:

- an entry is written into ``tmp/`` and renamed into ``entries/<hex>`` only once
  every file's sha256 matched (a reader never sees a half-written adapter);
- ``locks/<hex>.fetch`` (exclusive) lets one process download a digest at a time;
- ``locks/<hex>.pin`` is held *shared* by every engine process that handed the entry
  to vLLM, for as long as that process lives: vLLM re-reads an adapter from its path
  after evicting it from its CPU cache, so an entry in use must stay on disk. The
  evictor takes the pin lock exclusively without waiting and skips entries it cannot;
  the kernel drops the locks of a process that dies, so a crash leaves no stale pin;
- eviction is least-recently-used by the mtime of ``entries/<hex>/.used`` (touched on
  every resolve) until the total size is under the limit, under ``locks/evict``.

Lock files are empty and never deleted (deleting a lock file others wait on would
split them across two inodes). ``refs/`` maps ``ns/name@vN`` to a digest so an
engine can still load cached adapters by version while the catalog is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mol_platform.contract.blob_files import BlobFile, BlobFileError, digest_hex, manifest_digest

log = logging.getLogger("vllm.mol_platform.cache")

META = ".mol-entry.json"
USED = ".used"
# Temp folders older than this belong to a crashed writer.
STALE_TMP_SECONDS = 3600.0


class CacheError(Exception):
    """An entry could not be fetched or verified (the reason is the message)."""


# Downloads one file to a path and returns the sha256 hex of what it wrote.
Fetch = Callable[[BlobFile, Path], Awaitable[str]]


def _lock(path: Path, mode: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _try_lock(path: Path, mode: int) -> int | None:
    try:
        return _lock(path, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return None


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


class AdapterCache:
    """A size-bounded LRU of adapter folders keyed by manifest digest (see module doc)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache size must be positive bytes, got {max_bytes}")
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.entries = self.root / "entries"
        self.tmp = self.root / "tmp"
        self.locks = self.root / "locks"
        self.refs = self.root / "refs"
        for d in (self.entries, self.tmp, self.locks, self.refs):
            d.mkdir(parents=True, exist_ok=True)
        self._pins: dict[str, int] = {}  # hex -> fd holding the shared pin lock

    def close(self) -> None:
        """Release this process's pins (an exiting process releases them anyway)."""
        for fd in self._pins.values():
            os.close(fd)
        self._pins.clear()

    # --- lookups ------------------------------------------------------------------

    def path(self, digest: str) -> Path:
        return self.entries / digest_hex(digest)

    def meta(self, digest: str) -> dict[str, Any] | None:
        """What was recorded when the entry was written, or None if it is not cached."""
        try:
            data = json.loads((self.path(digest) / META).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def ref_digest(self, adapter: str, version: int) -> str | None:
        """The digest cached for ``adapter@vN`` (from an earlier online resolve)."""
        try:
            digest = (self.refs / adapter / f"v{version}").read_text().strip()
            digest_hex(digest)
        except (OSError, BlobFileError):
            return None
        return digest

    def remember_ref(self, adapter: str, version: int, digest: str) -> None:
        target = self.refs / adapter / f"v{version}"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(digest)
        os.replace(tmp, target)

    async def mark_compatible(self, digest: str, profile: str) -> None:
        """Record that ``profile`` accepted the entry (offline loads rely on it)."""
        meta = self.meta(digest)
        if meta is None or (meta.get("profiles") or {}).get(profile) is True:
            return
        hexd = digest_hex(digest)
        fd = await asyncio.to_thread(_lock, self.locks / f"{hexd}.fetch", fcntl.LOCK_EX)
        try:
            meta = self.meta(digest) or meta
            meta["profiles"] = {**(meta.get("profiles") or {}), profile: True}
            entry = self.entries / hexd
            tmp = entry / f"{META}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(meta, sort_keys=True))
            os.replace(tmp, entry / META)
        finally:
            os.close(fd)

    # --- use ----------------------------------------------------------------------

    async def pin(self, digest: str) -> Path | None:
        """Pin a cached entry for this process and mark it used; None if not cached."""
        hexd = digest_hex(digest)
        if hexd not in self._pins:
            fd = await asyncio.to_thread(_lock, self.locks / f"{hexd}.pin", fcntl.LOCK_SH)
            if not (self.entries / hexd / META).is_file():
                os.close(fd)
                return None
            self._pins[hexd] = fd
        entry = self.entries / hexd
        self._touch(entry)
        return entry

    async def ensure(self, digest: str, files: Sequence[BlobFile], fetch: Fetch,
                     meta: dict[str, Any]) -> Path:
        """The entry for ``digest``, downloading and verifying it first if needed."""
        hexd = digest_hex(digest)
        if manifest_digest(files) != digest:
            raise CacheError(f"the file list does not add up to {digest}: refusing it")
        cached = await self.pin(digest)
        if cached is not None:
            return cached
        fetch_fd = await asyncio.to_thread(_lock, self.locks / f"{hexd}.fetch", fcntl.LOCK_EX)
        try:
            if not (self.entries / hexd / META).is_file():
                await self._download(hexd, files, fetch, meta)
        finally:
            os.close(fetch_fd)
        entry = await self.pin(digest)
        if entry is None:  # evicted between download and pin: only with a tiny limit
            raise CacheError(f"{digest} was evicted right after download; raise the cache size")
        await asyncio.to_thread(self.evict, keep=hexd)
        return entry

    async def _download(self, hexd: str, files: Sequence[BlobFile], fetch: Fetch,
                        meta: dict[str, Any]) -> None:
        work = self.tmp / f"{hexd}.{os.getpid()}.{os.urandom(4).hex()}"
        work.mkdir()
        try:
            for f in files:
                got = await fetch(f, work / f.path)
                if f"sha256:{got}" != f.digest:
                    raise CacheError(f"{f.path}: downloaded sha256:{got}, expected {f.digest}")
            (work / META).write_text(json.dumps(meta, sort_keys=True))
            (work / USED).touch()
            try:
                os.rename(work, self.entries / hexd)
            except OSError:  # another writer won (it held no fetch lock: an old version)
                if not (self.entries / hexd / META).is_file():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _touch(self, entry: Path) -> None:
        with contextlib.suppress(OSError):
            (entry / USED).touch()

    # --- eviction -------------------------------------------------------------------

    def _entries_by_age(self) -> Iterator[tuple[float, str, int]]:
        for entry in self.entries.iterdir():
            try:
                used = (entry / USED).stat().st_mtime
            except OSError:
                used = 0.0
            yield used, entry.name, _tree_size(entry)

    def total_bytes(self) -> int:
        return sum(size for _used, _name, size in self._entries_by_age())

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove least-recently-used unpinned entries until under the limit."""
        removed: list[str] = []
        evict_fd = _lock(self.locks / "evict", fcntl.LOCK_EX)
        try:
            self._sweep_tmp()
            entries = sorted(self._entries_by_age())
            total = sum(size for _u, _n, size in entries)
            for _used, name, size in entries:
                if total <= self.max_bytes:
                    break
                if name == keep or name in self._pins:
                    continue
                pin_fd = _try_lock(self.locks / f"{name}.pin", fcntl.LOCK_EX)
                if pin_fd is None:  # an engine uses it
                    continue
                try:
                    trash = self.tmp / f"evict-{name}-{os.getpid()}-{os.urandom(4).hex()}"
                    os.rename(self.entries / name, trash)
                finally:
                    os.close(pin_fd)
                shutil.rmtree(trash, ignore_errors=True)
                total -= size
                removed.append(name)
            if total > self.max_bytes:
                log.warning("adapter cache %s holds %d bytes, over its limit of %d: the rest "
                            "is in use by running engines", self.root, total, self.max_bytes)
        finally:
            os.close(evict_fd)
        return removed

    def _sweep_tmp(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        for item in self.tmp.iterdir():
            with contextlib.suppress(OSError):
                if item.name.startswith("evict-") or item.stat().st_mtime < cutoff:
                    shutil.rmtree(item, ignore_errors=True)
