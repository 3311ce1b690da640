"""What a killed catalog leaves behind, removed at start and by gc.

A kill -9 during a publish can leave a temp upload folder (``mol-publish-<pid>-*`` in
the temp directory, holding files too large for memory), a partial blob in the local
store (``.<hex>.<pid>.<ns>``, renamed into place only when complete) or an incomplete
S3 multipart upload. Nothing references them. At start the catalog removes those of
processes that no longer run on this host and any older than the grace period; gc
removes those older than its grace period (publishes in flight are younger).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from mol_catalog.blobs.store import BlobStore

log = logging.getLogger("mol_catalog")

UPLOAD_PREFIX = "mol-publish-"


def upload_dir_prefix() -> str:
    """The temp folder prefix of this process's uploads (the pid tells whose it is)."""
    return f"{UPLOAD_PREFIX}{os.getpid()}-"


def pid_gone(pid: int) -> bool:
    """Whether no process with this pid runs on this host."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _newest_mtime(path: Path) -> float:
    newest = path.stat().st_mtime
    for entry in path.rglob("*"):
        try:
            newest = max(newest, entry.stat().st_mtime)
        except FileNotFoundError:
            continue
    return newest


def _stale_uploads(cutoff: float, dead_owners: bool) -> list[Path]:
    out = []
    for path in Path(tempfile.gettempdir()).glob(f"{UPLOAD_PREFIX}*"):
        pid_text = path.name[len(UPLOAD_PREFIX):].split("-", 1)[0]
        try:
            owner_gone = dead_owners and pid_text.isdigit() and pid_gone(int(pid_text))
            if path.is_dir() and (owner_gone or _newest_mtime(path) < cutoff):
                out.append(path)
        except FileNotFoundError:
            continue  # finished meanwhile
    return out


async def clean(blobs: BlobStore, grace_seconds: float, at_start: bool = False) -> int:
    """Remove leftovers older than the grace period (at start also those of processes
    gone); returns how many."""
    cutoff = time.time() - grace_seconds

    def _uploads() -> int:
        stale = _stale_uploads(cutoff, dead_owners=at_start)
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
        return len(stale)

    removed = await asyncio.to_thread(_uploads)
    return removed + await blobs.clean_partials(cutoff, pid_gone if at_start else None)


async def clean_at_start(blobs: BlobStore, grace_seconds: float) -> None:
    """``clean`` at start; a store that is down now is cleaned by a later start or gc."""
    try:
        removed = await clean(blobs, grace_seconds, at_start=True)
    except Exception as exc:
        log.warning("leftovers of earlier runs not cleaned: %r", exc)
        return
    if removed:
        log.info("removed %d leftovers of interrupted publishes", removed)
