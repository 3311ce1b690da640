"""Shared plumbing of the ``mol catalog`` verbs: client from options, errors, tables."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, NoReturn

import typer
import yaml
from pydantic import BaseModel

from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.contract import refs, spec
from mol_platform.contract.catalog_models import Reason
from mol_platform.contract.model_folder import FolderError
from mol_platform.contract.refs import RefError
from mol_platform.contract.safetensors_header import HeaderError


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


class Output(StrEnum):
    """What a verb prints on stdout: ``text`` for people, ``json``/``yaml`` for scripts."""

    text = "text"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[Output, typer.Option(
    "-o", "--output", case_sensitive=False,
    help="Output format: text (tables and lines, the default), json or yaml (the API's "
    "answer, for scripts and jq/yq).")]


def plain(data: Any) -> Any:
    """Typed answers (pydantic models, lists and dicts of them) as JSON-ready values."""
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, list | tuple):
        return [plain(item) for item in data]
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    return data


def print_data(data: Any, output: Output) -> None:
    """``data`` as one JSON or YAML document on stdout."""
    data = plain(data)
    if output is Output.yaml:
        typer.echo(yaml.safe_dump(data, sort_keys=True, allow_unicode=True).rstrip("\n"))
    else:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))


def emit(output: Output, data: Any, text: Callable[[], None]) -> None:
    """Print ``data`` as asked, or call ``text`` for the human form."""
    if output is Output.text:
        text()
    else:
        print_data(data, output)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain, aligned table (greppable, no colours), like kubectl's."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_reasons(reasons: Sequence[Reason], err: bool = False) -> None:
    for reason in reasons:
        typer.echo(f"    - [{reason.code}] {reason.message}", err=err)


def parse_duration(text: str) -> int:
    """``mol_platform.contract.spec.parse_duration`` for an option: a usage error when invalid."""
    try:
        return spec.parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_version(text: str) -> int:
    """``mol_platform.contract.refs.parse_version`` for an argument: a usage error when invalid."""
    try:
        return refs.parse_version(text)
    except RefError as exc:
        raise typer.BadParameter(str(exc)) from None


_LABEL_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?")


def parse_labels(pairs: Sequence[str]) -> dict[str, str]:
    """``["team=search", "tier=gold"]`` -> a dict; keys like Kubernetes label keys."""
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _LABEL_KEY.fullmatch(key):
            raise typer.BadParameter(
                f"{pair!r}: expected KEY=VALUE, KEY of letters, digits and . _ / - (at most "
                "63, starting and ending alphanumeric), e.g. team=search", param_hint="--label")
        if key in labels:
            raise typer.BadParameter(f"label {key!r} given twice", param_hint="--label")
        if len(value) > 256:
            raise typer.BadParameter(f"label {key!r}: value longer than 256 characters",
                                     param_hint="--label")
        labels[key] = value
    return labels


def human_size(size: int | None) -> str:
    if size is None:
        return ""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
