"""Shared plumbing of the ``mol catalog`` verbs: client from options, errors, tables."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import typer

from mol_platform import refs, spec
from mol_platform.catalog_client import CatalogClient, CatalogError
from mol_platform.model_folder import FolderError
from mol_platform.refs import RefError
from mol_platform.safetensors_header import HeaderError


@dataclass(frozen=True)
class CliState:
    """Group options (``--catalog-url``, ``--token``); None falls back to the environment."""

    url: str | None = None
    token: str | None = None


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"mol catalog: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def catalog(ctx: typer.Context) -> Iterator[CatalogClient]:
    """A client for the command; catalog and input errors become one line on stderr, exit 1."""
    state = ctx.obj if isinstance(ctx.obj, CliState) else CliState()
    try:
        with CatalogClient(state.url, state.token) as client:
            yield client
    except CatalogError as exc:
        fail(str(exc))
    except (RefError, FolderError, HeaderError, ValueError) as exc:
        fail(str(exc))


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain, aligned table (greppable, no colours), like kubectl's."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_reasons(reasons: Sequence[Any], err: bool = False) -> None:
    for reason in reasons:
        if isinstance(reason, dict):
            typer.echo(f"    - [{reason.get('code', '?')}] {reason.get('message', '')}", err=err)
        else:
            typer.echo(f"    - {reason}", err=err)


def parse_duration(text: str) -> int:
    """``mol_platform.spec.parse_duration`` for an option: a usage error when invalid."""
    try:
        return spec.parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_version(text: str) -> int:
    """``mol_platform.refs.parse_version`` for an argument: a usage error when invalid."""
    try:
        return refs.parse_version(text)
    except RefError as exc:
        raise typer.BadParameter(str(exc)) from None


def human_size(size: int | None) -> str:
    if size is None:
        return ""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
