"""The files of an adapter version as the catalog's resolve answer lists them, checked
before anything is written: plain file names, sha256 digests, a download URL.

Both ways an adapter reaches a disk use it: ``mol catalog pull`` (``apps/pull``) and
the vLLM resolver plugin's cache (``apps/vllm_plugin/cache``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mol_platform.contract.catalog_models import ResolvedFile

HEX_RE = re.compile(r"[0-9a-f]{64}")
# A file inside an adapter folder: a plain name, never a path or a hidden file.
FILE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


class BlobFileError(ValueError):
    """A resolve answer's file entry or digest is malformed (the reason is the message)."""


@dataclass(frozen=True)
class BlobFile:
    """One file of an adapter version, as the catalog's resolve answer lists it."""

    path: str
    digest: str
    size: int
    url: str

    @classmethod
    def parse(cls, f: ResolvedFile) -> BlobFile:
        """A file of a resolve answer, refused unless it is a plain file name (it is
        written into a folder) with a sha256 digest and a download URL."""
        path, digest, size, url = f.path, f.digest, f.size, f.url
        if not FILE_NAME_RE.fullmatch(path) or ".." in path:
            raise BlobFileError(f"refusing file name {path!r}: not a plain file name")
        if not digest.startswith("sha256:") or not HEX_RE.fullmatch(digest[7:]):
            raise BlobFileError(f"file {path}: malformed digest {digest!r}")
        if size < 0:
            raise BlobFileError(f"file {path}: malformed size {size!r}")
        if not url:
            raise BlobFileError(f"file {path}: no download URL")
        return cls(path, digest, size, url)


def manifest_digest(files: Sequence[BlobFile]) -> str:
    """The catalog's version digest: sha256 over ``<file digest>  <path>\\n`` sorted by path."""
    lines = "".join(f"{f.digest}  {f.path}\n" for f in sorted(files, key=lambda f: f.path))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def digest_hex(digest: str) -> str:
    hexpart = digest.removeprefix("sha256:")
    if not digest.startswith("sha256:") or not HEX_RE.fullmatch(hexpart):
        raise BlobFileError(f"malformed digest {digest!r}")
    return hexpart
