"""Hand-off from training: publish each saved checkpoint's adapter to the catalog.

``catalog_callback(...)`` returns a ``transformers.TrainerCallback`` for a PEFT training
run: every time the ``Trainer`` saves a checkpoint, the adapter in it
(``adapter_config.json`` + ``adapter_model.safetensors``; never the optimizer or the
base weights) becomes a new catalog version with its lineage:

- ``parent``: the version published from the previous checkpoint of the run (the first
  one's parent is the ``parent`` given, e.g. the version training started from);
- the base revision: the version's ``base`` (``name@revision``; a bare name is pinned
  to the base's current revision when the run starts);
- ``source``: ``mol-train://<run>/checkpoint-<step>?step=N&args=sha256:..&dataset=sha256:..``
  with the global step, a hash of the training arguments (their JSON, without the
  output and logging folders, so the same recipe elsewhere hashes the same) and the
  data set's digest when given (:func:`parse_source` reads it back);
- optionally an alias (e.g. ``candidate``) moved to each new checkpoint.

transformers is imported only when the callback is made: the runtime wheel does not
depend on it, and the publishing logic (:class:`CheckpointPublisher`) needs none of it.
Only the main process of a distributed run publishes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.contract.catalog_models import Published
from mol_platform.contract.evals import DIGEST_RE
from mol_platform.contract.refs import AdapterRef, RefError, check_alias, check_name

log = logging.getLogger(__name__)
SOURCE_SCHEME = "mol-train"
# Fields of the training arguments that say where a run writes, not how it trains.
VOLATILE_ARGS = frozenset({"output_dir", "logging_dir", "run_name", "hub_token",
                           "push_to_hub_token", "hub_model_id"})


def args_digest(arguments: Mapping[str, Any]) -> str:
    """sha256 of the training arguments as canonical JSON, without VOLATILE_ARGS."""
    kept = {k: v for k, v in arguments.items() if k not in VOLATILE_ARGS}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()}"


def training_source(run: str, step: int, args_hash: str, dataset_digest: str | None) -> str:
    query = f"step={step}&args={args_hash}"
    if dataset_digest:
        query += f"&dataset={dataset_digest}"
    return f"{SOURCE_SCHEME}://{quote(run, safe='')}/checkpoint-{step}?{query}"


def parse_source(source: str) -> dict[str, str]:
    """The lineage fields of a version's ``source`` written by this callback: ``run``,
    ``step``, ``args`` and (when given) ``dataset``; {} for any other source."""
    parts = urlsplit(source)
    if parts.scheme != SOURCE_SCHEME:
        return {}
    return {"run": parts.netloc, **dict(parse_qsl(parts.query))}


@dataclass
class CheckpointPublisher:
    """Publishes checkpoint folders as versions of ``adapter``, each the child of the one
    before. What the callback calls; usable on its own with any checkpoint folder.

    ``base``: ``NAME`` or ``NAME@REVISION``; ``parent``: the first checkpoint's lineage
    parent, ``NS/NAME@REF`` of the same adapter or a version number; ``strict``: a
    failed publish raises (the default: a run should not train on without its
    hand-off), else it is logged and training goes on."""

    adapter: str
    base: str
    catalog_url: str | None = None
    token: str | None = None
    parent: str | int | None = None
    dataset_digest: str | None = None
    alias: str | None = None
    tags: Sequence[str] = ()
    strict: bool = True
    published: list[Published] = field(default_factory=list)
    _base_ref: str | None = None
    _last: int | None = None

    def __post_init__(self) -> None:
        AdapterRef.parse(f"{self.adapter}@latest")
        if self.alias is not None:
            check_alias(self.alias)
        name, _, _revision = self.base.partition("@")
        check_name(name, "base model name")
        if self.dataset_digest is not None and DIGEST_RE.fullmatch(self.dataset_digest) is None:
            raise RefError(f"dataset digest {self.dataset_digest!r}: expected sha256:<64 hex>")

    def client(self) -> CatalogClient:
        return CatalogClient(self.catalog_url, self.token)

    def _first_parent(self, client: CatalogClient) -> int | None:
        if self.parent is None or isinstance(self.parent, int):
            return self.parent
        if "@" not in self.parent:
            return AdapterRef.parse(f"{self.adapter}@v{self.parent.removeprefix('v')}").version
        ref = AdapterRef.parse(self.parent)
        if ref.adapter != self.adapter:
            raise RefError(f"parent {self.parent}: a lineage parent is a version of "
                           f"{self.adapter} itself")
        return ref.version if ref.version is not None else client.resolve(str(ref)).version

    def publish(self, folder: Path, step: int, run: str, arguments: Mapping[str, Any],
                ) -> Published | None:
        """Publish one checkpoint folder; None when it failed and ``strict`` is off."""
        try:
            with self.client() as client:
                if self._base_ref is None:
                    name, _, revision = self.base.partition("@")
                    self._base_ref = f"{name}@{revision or client.get_base(name).current}"
                parent = self._last if self._last is not None else self._first_parent(client)
                source = training_source(run, step, args_digest(arguments),
                                         self.dataset_digest)
                result = client.publish(folder, self.adapter, base=self._base_ref,
                                        alias=self.alias, tags=self.tags, parent=parent,
                                        source=source)
        except (CatalogError, RefError, OSError, ValueError) as exc:
            if self.strict:
                raise
            log.warning("publishing %s step %d to the catalog failed: %s", folder, step, exc)
            return None
        self._last = result.version
        self.published.append(result)
        log.info("published %s step %d as %s v%d (parent %s)", folder, step, self.adapter,
                 result.version, parent)
        return result


def catalog_callback(adapter: str, *, base: str, catalog_url: str | None = None,
                     token: str | None = None, parent: str | int | None = None,
                     dataset_digest: str | None = None, alias: str | None = None,
                     tags: Sequence[str] = (), strict: bool = True) -> Any:
    """A ``transformers.TrainerCallback`` that publishes every saved checkpoint's adapter (see the
    module docstring); its ``publisher`` attribute holds what was published. Needs
    transformers (and PEFT for the adapter files); raises ImportError saying so."""
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise ImportError("mol_platform.apps.training needs transformers: pip install "
                          "transformers peft") from exc
    publisher = CheckpointPublisher(adapter, base, catalog_url, token, parent, dataset_digest,
                                    alias, tags, strict)

    class CatalogCallback(TrainerCallback):  # type: ignore[misc]
        """Publishes each checkpoint the Trainer saves to the catalog."""

        def __init__(self) -> None:
            self.publisher = publisher

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if not state.is_world_process_zero:
                return control
            step = int(state.global_step)
            folder = Path(args.output_dir) / f"checkpoint-{step}"
            run = str(getattr(args, "run_name", None) or Path(args.output_dir).name)
            publisher.publish(folder, step, run, args.to_dict())
            return control

    return CatalogCallback()
