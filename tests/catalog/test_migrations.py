"""Alembic: empty -> head, down one step and back up, on SQLite and Postgres."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect

from mol_catalog.db import downgrade, migrate, sync_url
from mol_catalog.models import Base
from mol_platform.testing.postgres import PostgresCluster, fresh_database


def _tables_and_indexes(url: str) -> tuple[set[str], set[str]]:
    engine = create_engine(sync_url(url))
    try:
        insp = inspect(engine)
        tables = set(insp.get_table_names()) - {"alembic_version"}
        indexes = {i["name"] for t in tables for i in insp.get_indexes(t) if i["name"]}
        return tables, indexes
    finally:
        engine.dispose()


def test_sqlite_upgrade_downgrade_upgrade(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    migrate(url)
    tables, _ = _tables_and_indexes(url)
    assert tables == set(Base.metadata.tables)
    downgrade(url, "-1")
    migrate(url)
    downgrade(url, "base")
    assert _tables_and_indexes(url)[0] == set()
    migrate(url)
    assert _tables_and_indexes(url)[0] == set(Base.metadata.tables)


def test_postgres_upgrade_downgrade_upgrade(postgres_cluster: PostgresCluster) -> None:
    url = fresh_database(postgres_cluster, "migrations", extensions=())
    migrate(url)
    tables, indexes = _tables_and_indexes(url)
    assert tables == set(Base.metadata.tables)
    assert {"ix_adapters_full_name_trgm", "ix_adapters_search_scan",
            "ix_adapter_tags_tag_base_name_adapter_id", "ix_adapters_base_name_id"} <= indexes
    downgrade(url, "0003")  # 0004 -> 0003: blob_deletions goes
    assert "blob_deletions" not in _tables_and_indexes(url)[0]
    downgrade(url, "-1")  # 0003 -> 0002: the search-scan index goes, the trigram index stays
    assert {"ix_adapters_search_scan", "ix_adapters_full_name_trgm"} & _tables_and_indexes(
        url)[1] == {"ix_adapters_full_name_trgm"}
    downgrade(url, "-1")
    assert "ix_adapters_full_name_trgm" not in _tables_and_indexes(url)[1]
    migrate(url)
    assert {"ix_adapters_full_name_trgm", "ix_adapters_search_scan"} <= _tables_and_indexes(
        url)[1]
    downgrade(url, "base")
    assert _tables_and_indexes(url)[0] == set()
    migrate(url)
    assert _tables_and_indexes(url)[0] == set(Base.metadata.tables)
