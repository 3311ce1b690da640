"""Reaching the database, one module per concern.

- ``engines``: the async engine of a URL, set up per backend.
- ``unit``: the unit of work, the write style (one transaction, events at commit).
- ``reader``: ``Prepared`` statements on a ``Reader``, the read style.
- ``values``: decoding what ``Prepared`` reads hand back.
- ``database``: ``Database``, which opens units of work and read connections.
- ``migrations``: Alembic upgrade and downgrade.
- ``writes``: the backend's ``INSERT ... ON CONFLICT`` and the claim of a batch id.

The names below are the package's public face; import them from ``mol_catalog.db``.
"""

from mol_catalog.db.database import Database
from mol_catalog.db.migrations import downgrade, migrate
from mol_catalog.db.reader import Prepared, ReadConn, Reader
from mol_catalog.db.unit import UnitOfWork
from mol_catalog.db.values import datetime_value, json_text, json_value
from mol_catalog.db.writes import claim_batch, dialect_insert
from mol_catalog.db_urls import is_sqlite, sync_url

__all__ = ["Database", "Prepared", "ReadConn", "Reader", "UnitOfWork", "claim_batch",
           "datetime_value", "dialect_insert", "downgrade", "is_sqlite", "json_text",
           "json_value", "migrate", "sync_url"]
