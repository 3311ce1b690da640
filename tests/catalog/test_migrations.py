"""Alembic: empty -> head, down one step and back up, on SQLite and Postgres."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, inspect, text

from mol_catalog.db import downgrade, migrate, sync_url
from mol_catalog.models import Base
from mol_catalog.shared_docs import digest_of
from mol_testkit.postgres import PostgresCluster, fresh_database


def _tables_and_indexes(url: str) -> tuple[set[str], set[str]]:
    engine = create_engine(sync_url(url))
    try:
        insp = inspect(engine)
        tables = set(insp.get_table_names()) - {"alembic_version"}
        indexes = {i["name"] for t in tables for i in insp.get_indexes(t) if i["name"]}
        return tables, indexes
    finally:
        engine.dispose()


def _included(url: str, index: str) -> list[str]:
    """The INCLUDE columns of a Postgres index."""
    return [r[0] for r in _rows(url, "SELECT a.attname FROM pg_index i JOIN pg_class c ON "
                                "c.oid = i.indexrelid JOIN pg_attribute a ON a.attrelid = "
                                "i.indrelid AND a.attnum = ANY(i.indkey[i.indnkeyatts:]) "
                                f"WHERE c.relname = '{index}'")]


def _namespace_and_base(conn: Connection, ts: str) -> None:
    """Namespace ``ns`` (id 1) and base ``b@r1`` (id 1), as raw rows of an old schema."""
    conn.execute(text("INSERT INTO namespaces (id, name, created_at) VALUES (1, 'ns', :ts)"),
                 {"ts": ts})
    conn.execute(text(
        "INSERT INTO base_models (id, name, revision, architecture, config, tensors, shapes,"
        " content_digest, created_at) VALUES (1, 'b', 'r1', 'LlamaForCausalLM', '{}', '{}',"
        " '{}', 'sha256:0', :ts)"), {"ts": ts})


def test_tag_rows_get_their_names(backend: str, tmp_path: object,
                                  request: pytest.FixtureRequest) -> None:
    """0012 copies each adapter's name onto its tag rows."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/t.db"
    else:
        url = fresh_database(request.getfixturevalue("postgres_cluster"), "tagnames",
                             extensions=())
    migrate(url, "0011")
    ts = "2026-01-01 00:00:00+00:00"
    engine = create_engine(sync_url(url))
    with engine.begin() as conn:
        _namespace_and_base(conn, ts)
        for i, name in ((1, "a"), (2, "z")):
            conn.execute(text(
                "INSERT INTO adapters (id, namespace_id, name, full_name, base_model_id,"
                " base_name, tags, labels, latest_version, version_count, created_at,"
                " updated_at) VALUES (:i, 1, :n, :f, 1, 'b', '[]', '{}', 1, 1, :ts, :ts)"),
                {"i": i, "n": name, "f": f"ns/{name}", "ts": ts})
        conn.execute(text("INSERT INTO adapter_tags (tag, adapter_id, base_name, base_model_id)"
                          " VALUES ('chat', 1, 'b', 1), ('code', 1, 'b', 1), ('chat', 2, 'b', 1)"))
    engine.dispose()
    migrate(url)
    assert _rows(url, "SELECT tag, adapter_id, full_name FROM adapter_tags ORDER BY tag, "
                      "adapter_id") == [("chat", 1, "ns/a"), ("chat", 2, "ns/z"),
                                        ("code", 1, "ns/a")]


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
            "ix_adapter_tags_tag_base_name_adapter_id", "ix_adapters_base_name_id",
            "ix_adapter_tags_tag_adapter_id_name"} <= indexes
    assert _included(url, "ix_adapters_namespace_id_id") == ["full_name"]
    downgrade(url, "0011")  # 0012 -> 0011: the tag rows' names and the covering indexes go
    assert "ix_adapter_tags_tag_adapter_id_name" not in _tables_and_indexes(url)[1]
    assert {"ix_adapters_namespace_id_id", "ix_adapters_base_name_id",
            "ix_adapters_base_model_id_id"} <= _tables_and_indexes(url)[1]
    assert _included(url, "ix_adapters_base_model_id_id") == []
    migrate(url)
    assert _included(url, "ix_adapters_base_model_id_id") == ["full_name"]
    downgrade(url, "0005")  # 0006 -> 0005: alias removals go
    downgrade(url, "0004")  # 0005 -> 0004: shared_docs goes
    assert "shared_docs" not in _tables_and_indexes(url)[0]
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


CONFIG = {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"], "peft_type": "LORA"}
SHAPES = {f"base_model.model.model.layers.{i}.self_attn.q_proj.lora_{ab}.weight": shape
          for i in range(32) for ab, shape in (("A", [16, 4096]), ("B", [4096, 16]))}
OTHER_CONFIG = {**CONFIG, "r": 8}


def _seed_inline(url: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Three versions at 0004 (docs inline): two share config and shapes, one differs."""
    docs = [(CONFIG, SHAPES), (CONFIG, SHAPES), (OTHER_CONFIG, {"t.lora_A.weight": [8, 64]})]
    engine = create_engine(sync_url(url))
    ts = "2026-01-01 00:00:00+00:00"
    with engine.begin() as conn:
        _namespace_and_base(conn, ts)
        conn.execute(text(
            "INSERT INTO adapters (id, namespace_id, name, full_name, base_model_id, base_name,"
            " tags, labels, latest_version, version_count, created_at, updated_at) VALUES"
            " (1, 1, 'a', 'ns/a', 1, 'b', '[]', '{}', 3, 3, :ts, :ts)"), {"ts": ts})
        for n, (config, shapes) in enumerate(docs, 1):
            conn.execute(text(
                "INSERT INTO versions (id, adapter_id, number, digest, base_model_id, rank,"
                " alpha, target_modules, status, size, files, adapter_config, tensors,"
                " created_at) VALUES (:n, 1, :n, :d, 1, 16, 32, '[]', 'ready', 1, '[]', :c,"
                " :t, :ts)"),
                {"n": n, "d": f"sha256:{n}", "c": json.dumps(config), "t": json.dumps(shapes),
                 "ts": ts})
    engine.dispose()
    return docs


def _rows(url: str, sql: str) -> list[Any]:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def _as_json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_shared_docs_move_out_and_back(backend: str, tmp_path: object,
                                       request: pytest.FixtureRequest) -> None:
    """0005 moves inline configs and shape maps to shared_docs, one row per distinct
    document, and its downgrade puts every version's own documents back inline."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/m.db"
    else:
        cluster = request.getfixturevalue("postgres_cluster")
        url = fresh_database(cluster, "shared_docs", extensions=())
    migrate(url, "0004")
    docs = _seed_inline(url)
    migrate(url)
    stored = {d: _as_json(b) for d, b in _rows(url, "SELECT digest, body FROM shared_docs")}
    assert len(stored) == 4  # 2 configs + 2 shape maps for 3 versions
    refs = _rows(url, "SELECT config_digest, tensors_digest FROM versions ORDER BY id")
    assert [(stored[c], stored[t]) for c, t in refs] == docs
    assert refs[0] == (digest_of(CONFIG), digest_of(SHAPES)) == refs[1]
    downgrade(url, "0004")
    back = _rows(url, "SELECT adapter_config, tensors FROM versions ORDER BY id")
    assert [(_as_json(c), _as_json(t)) for c, t in back] == docs
    assert "shared_docs" not in _tables_and_indexes(url)[0]


def _version_nullable(url: str) -> bool:
    engine = create_engine(sync_url(url))
    try:
        columns = inspect(engine).get_columns("alias_history")
        return bool(next(c for c in columns if c["name"] == "version")["nullable"])
    finally:
        engine.dispose()


def test_alias_removals_need_a_nullable_version(tmp_path: object) -> None:
    """0006 lets the alias history record a removal (NULL version); its downgrade drops
    those rows and makes the column required again."""
    url = f"sqlite:///{tmp_path}/m.db"
    migrate(url)
    assert _version_nullable(url)
    engine = create_engine(sync_url(url))  # SQLite: foreign keys are not enforced here
    insert = text("INSERT INTO alias_history (adapter_id, alias, version, previous, changed_at)"
                  " VALUES (1, 'stable', :version, 1, '2026-11-30 00:00:00')")
    with engine.begin() as conn:
        conn.execute(insert, [{"version": None}, {"version": 2}])
    downgrade(url, "0005")
    assert not _version_nullable(url)
    with engine.connect() as conn:
        kept = conn.execute(text("SELECT version FROM alias_history")).scalars().all()
    engine.dispose()
    assert kept == [2]
