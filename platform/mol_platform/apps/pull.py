"""Download one adapter version into a PEFT folder, every file checked by its digest.

What ``mol catalog pull`` does, usable from scripts: resolve the reference, then per
file keep what is already there with the right sha256, else download to a temporary
name beside it, verify, and rename it into place, so the folder never holds a partial
or wrong file under a real name (like ``hf download --local-dir``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.contract.blob_files import BlobFile, BlobFileError, digest_hex
from mol_platform.contract.catalog_models import Resolved


@dataclass
class Pulled:
    """Where the version landed and which files were fetched or already there."""

    adapter: str
    version: int
    digest: str
    folder: Path
    downloaded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"adapter": self.adapter, "version": self.version, "digest": self.digest,
                "folder": str(self.folder), "downloaded": self.downloaded,
                "unchanged": self.unchanged}


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _is_current(dest: Path, f: BlobFile) -> bool:
    return dest.is_file() and dest.stat().st_size == f.size and _sha256(dest) == digest_hex(
        f.digest)


def plan(client: CatalogClient, ref: str) -> tuple[Resolved, list[BlobFile]]:
    """The resolve answer for ``ref`` and its checked file entries."""
    answer = client.resolve(ref)
    try:
        files = [BlobFile.parse(f) for f in answer.files]
    except BlobFileError as exc:
        raise CatalogError(0, "MalformedAnswer", f"{ref}: {exc}") from None
    if not files:
        raise CatalogError(0, "MalformedAnswer", f"{ref} lists no files")
    return answer, files


def total_bytes(files: list[BlobFile]) -> int:
    return sum(f.size for f in files)


def _file_mode() -> int:
    """0666 less the umask (0644 under the usual 022), as curl and huggingface-cli leave
    files: the temporary file a download lands in is 0600, and an engine running as
    another user must still read the pulled adapter."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def pull(client: CatalogClient, ref: str, local_dir: Path, *,
         progress: Callable[[int], None] | None = None,
         planned: tuple[Resolved, list[BlobFile]] | None = None) -> Pulled:
    """Make ``local_dir`` hold version ``ref``'s files; other files there stay.

    Raises :class:`CatalogError` when a download's digest differs (nothing is renamed).
    ``progress(n)`` sees the bytes of each block downloaded or found current.
    """
    answer, files = planned or plan(client, ref)
    local_dir.mkdir(parents=True, exist_ok=True)
    result = Pulled(answer.adapter, answer.version, answer.digest, local_dir.resolve())
    for f in files:
        dest = local_dir / f.path
        if _is_current(dest, f):
            result.unchanged.append(f.path)
            if progress is not None:
                progress(f.size)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            got = client.download(f.url, tmp, progress=progress)
            if got != digest_hex(f.digest):
                raise CatalogError(0, "DigestMismatch",
                                   f"{f.path}: downloaded sha256:{got}, the catalog lists "
                                   f"{f.digest}; nothing was written")
            os.chmod(tmp, _file_mode())
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        result.downloaded.append(f.path)
    return result
