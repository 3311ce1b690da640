"""Registering base-model revisions and turning them into compat.BaseShapes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

from mol_catalog.base_models import repository
from mol_catalog.base_models.repository import BaseRow
from mol_catalog.base_models.schemas import BaseModelCreate
from mol_catalog.db import ReadConn, UnitOfWork
from mol_catalog.errors import BadRequest, Conflict, InvalidName, NotFound, UnknownBaseModel
from mol_catalog.models import utcnow
from mol_catalog.util import check_json, valid_name
from mol_platform.contract.compat import BaseModelError, BaseShapes
from mol_platform.contract.refs import REVISION_PATTERN

MAX_LAYERS = 100_000  # far beyond any model; keeps layer numbers plain 64-bit integers


@dataclasses.dataclass(frozen=True)
class KnownBase:
    """A registered base revision as a publish checks adapters against it. A revision's
    content never changes (other content under the same name@revision is refused), so
    the catalog keeps these for the life of the process (``Catalog.bases``)."""

    id: int
    ref: str  # name@revision
    shapes: BaseShapes


def shapes_of(row: BaseRow) -> BaseShapes:
    s = row.shapes
    return BaseShapes(architecture=s["architecture"], num_layers=int(s["num_layers"]),
                      modules={k: (int(v[0]), int(v[1])) for k, v in s["modules"].items()})


def record(row: BaseRow) -> dict[str, Any]:
    return {"name": row.name, "revision": row.revision, "architecture": row.architecture,
            "config": row.config, "tensors": row.tensors,
            "num_layers": row.shapes["num_layers"], "created_at": row.created_at}


def parse_ref(text: str) -> tuple[str, str | None]:
    """``name@revision`` or ``name`` -> (name, revision or None)."""
    name, _, revision = text.partition("@")
    valid_name(name, "base model name")
    if revision and re.fullmatch(REVISION_PATTERN, revision) is None:
        raise InvalidName(f"invalid base model revision {revision[:140]!r}: letters, digits, "
                          "'.', '_' or '-', starting with a letter or digit, at most 128")
    return name, (revision or None)


async def find(conn: ReadConn, ref: str) -> BaseRow:
    """The base revision named by ``name@revision`` (or the newest revision of ``name``)."""
    name, revision = parse_ref(ref)
    if revision is None:
        row = await repository.latest(conn, name)
    else:
        row = await repository.get(conn, name, revision)
    if row is None:
        raise UnknownBaseModel(
            f"unknown base model {ref!r}: register it first with POST /v1/base-models "
            "(mol catalog base register DIR --name NAME)"
        )
    return row


async def register(uow: UnitOfWork, body: BaseModelCreate) -> tuple[dict[str, Any], bool]:
    """Store a revision; (record, created). Same content again is a no-op, other content 409."""
    valid_name(body.name, "base model name")
    check_json(body.config, "config")
    try:
        shapes = BaseShapes.from_config_and_tensors(body.config, body.tensors)
    except BaseModelError as exc:
        raise BadRequest(f"base model {body.name}@{body.revision}: {exc}") from None
    if shapes.num_layers > MAX_LAYERS:
        raise BadRequest(f"base model {body.name}@{body.revision}: {shapes.num_layers} layers "
                         f"(at most {MAX_LAYERS})")
    architecture = body.architecture or shapes.architecture
    canonical = json.dumps({"architecture": architecture, "config": body.config,
                            "tensors": body.tensors}, sort_keys=True, separators=(",", ":"))
    digest = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    existing = await repository.get(uow.conn, body.name, body.revision)
    if existing is not None:
        if existing.content_digest != digest:
            raise Conflict(f"base model {body.name}@{body.revision} is already registered with "
                           "different content: register the new content under a new revision")
        return record(existing), False
    row = BaseRow(0, body.name, body.revision, architecture, body.config, body.tensors,
                  {"architecture": shapes.architecture, "num_layers": shapes.num_layers,
                   "modules": {k: list(v) for k, v in shapes.modules.items()}},
                  digest, utcnow())
    values = {k: v for k, v in vars(row).items() if k != "id"}
    row = dataclasses.replace(row, id=await repository.insert_base(uow.conn, values))
    uow.emit("base.registered", data={"base": row.ref})
    return record(row), True


async def describe(conn: ReadConn, name: str) -> dict[str, Any]:
    valid_name(name, "base model name")
    rows = await repository.revisions(conn, name)
    if not rows:
        raise NotFound(f"unknown base model {name!r}")
    revs = [{k: v for k, v in record(r).items() if k != "name"} for r in rows]
    return {"name": name, "current": rows[0].revision, "revisions": revs}
