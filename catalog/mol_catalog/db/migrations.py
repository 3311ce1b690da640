"""Alembic migrations: where the scripts are, upgrade and downgrade (sync, before serving)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mol_catalog.db.engines import prepare_sqlite_path
from mol_catalog.db_urls import is_sqlite, sync_url


def migrations_dir() -> Path:
    """Alembic's script folder: packaged next to mol_catalog, or the repository's."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "_migrations"
    if packaged.is_dir():
        return packaged
    return package.parents[1] / "migrations"


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", sync_url(url).replace("%", "%%"))
    return cfg


def migrate(url: str, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (sync; call before serving)."""
    from alembic import command

    if is_sqlite(url):
        prepare_sqlite_path(url)
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)
