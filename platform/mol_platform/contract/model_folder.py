"""Local model and adapter folders as the catalog client sends them.

A base model is registered from its folder by shapes only: config.json and the
safetensors header(s) (one ``model.safetensors``, or the shards a
``model.safetensors.index.json`` lists); weights never leave the machine. An adapter
is published as a streamed multipart body so large files are neither read into memory
nor sent without progress.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mol_platform.contract.safetensors_header import header_shapes, read_header

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
INDEX_FILE = "model.safetensors.index.json"
CHUNK = 256 * 1024

Progress = Callable[[int, int], None]


class FolderError(ValueError):
    """A local folder that does not hold what the command needs; the message says what."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FolderError(f"{path} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FolderError(f"{path} is not readable JSON: {exc}") from None


def safetensors_files(folder: Path) -> list[Path]:
    """The weight files of a model folder: the index's shards, else ``*.safetensors``."""
    index = folder / INDEX_FILE
    if index.exists():
        doc = _read_json(index)
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise FolderError(f"{index}: expected an object with a 'weight_map' of file names")
        shards = sorted(set(weight_map.values()))
        files = [folder / s for s in shards]
        if any(Path(s).name != s for s in shards):
            raise FolderError(f"{index}: shard names must be plain file names, got {shards}")
        missing = [s for s, f in zip(shards, files, strict=True) if not f.is_file()]
        if missing:
            raise FolderError(f"{index} lists shards that are not in {folder}: {missing}")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FolderError(f"{folder} has no *.safetensors file and no {INDEX_FILE}")
    return files


@dataclass(frozen=True)
class BaseModelFolder:
    """What ``POST /v1/base-models`` needs from a local model folder."""

    config: dict[str, Any]
    tensors: dict[str, list[int]]
    architecture: str

    def default_revision(self) -> str:
        """sha256 over config.json and the header shapes, first 12 hex: same model, same id."""
        digest = hashlib.sha256()
        digest.update(json.dumps(self.config, sort_keys=True, separators=(",", ":")).encode())
        digest.update(json.dumps(self.tensors, sort_keys=True, separators=(",", ":")).encode())
        return digest.hexdigest()[:12]

    def payload(self, name: str, revision: str | None = None) -> dict[str, Any]:
        return {"name": name, "revision": revision or self.default_revision(),
                "architecture": self.architecture, "config": self.config,
                "tensors": self.tensors}


def read_base_model_folder(folder: Path) -> BaseModelFolder:
    """Read config.json and every safetensors header of a model folder (no weights)."""
    if not folder.is_dir():
        raise FolderError(f"{folder} is not a folder")
    config = _read_json(folder / "config.json")
    if not isinstance(config, dict):
        raise FolderError(f"{folder / 'config.json'} must be a JSON object")
    tensors: dict[str, list[int]] = {}
    for path in safetensors_files(folder):
        tensors.update(header_shapes(read_header(path)))
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        architecture = archs[0]
    else:
        architecture = str(config.get("model_type") or "unknown")
    return BaseModelFolder(config=config, tensors=tensors, architecture=architecture)


def adapter_files(folder: Path) -> list[Path]:
    """The two PEFT files of an adapter folder, checked to exist."""
    if not folder.is_dir():
        raise FolderError(f"{folder} is not a folder")
    files = [folder / name for name in ADAPTER_FILES]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise FolderError(f"{folder} is not a PEFT adapter folder: missing {', '.join(missing)}")
    return files


@dataclass
class MultipartBody:
    """A multipart/form-data body streamed from disk, reporting bytes sent."""

    fields: Sequence[tuple[str, str]]
    files: Sequence[Path]
    progress: Progress | None = None
    boundary: str = ""

    def __post_init__(self) -> None:
        self.boundary = self.boundary or f"mol-{secrets.token_hex(16)}"

    def _field_head(self, name: str) -> bytes:
        return (f"--{self.boundary}\r\nContent-Disposition: form-data; "
                f'name="{name}"\r\n\r\n').encode()

    def _file_head(self, path: Path) -> bytes:
        return (f"--{self.boundary}\r\nContent-Disposition: form-data; name=\"{path.name}\"; "
                f"filename=\"{path.name}\"\r\nContent-Type: application/octet-stream"
                "\r\n\r\n").encode()

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def __len__(self) -> int:
        total = len(f"--{self.boundary}--\r\n")
        for name, value in self.fields:
            total += len(self._field_head(name)) + len(value.encode()) + 2
        for path in self.files:
            total += len(self._file_head(path)) + os.path.getsize(path) + 2
        return total

    def __iter__(self) -> Iterator[bytes]:
        total = len(self)
        sent = 0

        def report(chunk: bytes) -> bytes:
            nonlocal sent
            sent += len(chunk)
            if self.progress is not None:
                self.progress(sent, total)
            return chunk

        for name, value in self.fields:
            yield report(self._field_head(name) + value.encode() + b"\r\n")
        for path in self.files:
            yield report(self._file_head(path))
            with path.open("rb") as fh:
                while chunk := fh.read(CHUNK):
                    yield report(chunk)
            yield report(b"\r\n")
        yield report(f"--{self.boundary}--\r\n".encode())
