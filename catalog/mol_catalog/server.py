"""``serve()``: run the catalog under uvicorn (migrating the database first)."""

from __future__ import annotations

import os

from mol_catalog.db import is_sqlite, migrate
from mol_catalog.settings import CatalogSettings


def serve(host: str = "127.0.0.1", port: int = 8080, db: str | None = None,
          blobs: str | None = None, workers: int = 1, auth: bool | None = None,
          migrate_db: bool | None = None) -> None:
    """Run the service; arguments override the MOL_CATALOG_* environment.

    The database is migrated to head first (always on SQLite so ``mol up`` just works;
    on Postgres unless MOL_CATALOG_MIGRATE=false). With ``workers > 1`` uvicorn runs
    ``app_factory`` in each worker, which reads the settings from the environment, so
    the overrides are exported there.
    """
    import uvicorn

    overrides: dict[str, str] = {}
    if db is not None:
        overrides["MOL_CATALOG_DB_URL"] = db
    if blobs is not None:
        overrides["MOL_CATALOG_BLOB_URL"] = blobs
    if auth is not None:
        overrides["MOL_CATALOG_AUTH"] = "on" if auth else "off"
    os.environ.update(overrides)
    settings = CatalogSettings()
    if migrate_db is None:
        migrate_db = settings.migrate
    if migrate_db or is_sqlite(settings.db_url):
        migrate(settings.db_url)
    if workers > 1:
        uvicorn.run("mol_catalog.app:app_factory", factory=True, workers=workers, host=host,
                    port=port, http="httptools", loop="uvloop", access_log=False,
                    log_level="warning", lifespan="on")
    else:
        from mol_catalog.app import create_app
        from mol_catalog.runtime import tune_gc

        app = create_app(settings)
        tune_gc()
        uvicorn.run(app, host=host, port=port, http="httptools", loop="uvloop",
                    access_log=False, log_level="warning", lifespan="on")
