"""Alembic environment for the catalog (sync drivers: pysqlite, psycopg 3)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool

from mol_catalog.db import sync_url
from mol_catalog.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("MOL_CATALOG_DB_URL")
    if not url:
        raise RuntimeError("set MOL_CATALOG_DB_URL (or sqlalchemy.url) to migrate the catalog")
    return sync_url(url)


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=target_metadata,
                              render_as_batch=connection.dialect.name == "sqlite")
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
