"""``serve()``: run the catalog under uvicorn (migrating the database first)."""

from __future__ import annotations

import ipaddress
import logging
import logging.config
import os
from typing import Any

from mol_catalog.db import is_sqlite, migrate
from mol_catalog.logs import log_config, startup_line
from mol_catalog.settings import CatalogSettings


class InsecureBind(ValueError):
    """Auth off on an address other machines can reach, without the explicit opt-in."""


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname may resolve to anything


def check_exposure(host: str, auth_enabled: bool, insecure: bool) -> bool:
    """Without auth every caller is admin: only loopback, unless forced as insecure.
    True when it is forced (auth off where others can reach it): ``serve`` warns then."""
    if auth_enabled or is_loopback(host):
        return False
    if insecure:
        return True
    raise InsecureBind(
        f"refusing to serve without authentication on {host}: anyone who can reach it "
        "could publish, yank and delete. Listen on 127.0.0.1, keep auth on "
        "(MOL_CATALOG_ADMIN_TOKEN sets a bootstrap admin token), or pass --insecure-no-auth "
        "to accept the risk.")


def serve(host: str = "127.0.0.1", port: int = 8080, db: str | None = None,
          blobs: str | None = None, workers: int = 1, auth: bool | None = None,
          migrate_db: bool | None = None, insecure: bool = False,
          log_level: str | None = None, access_log: bool | None = None,
          log_format: str | None = None) -> None:
    """Run the service; arguments override the MOL_CATALOG_* environment.

    The database is migrated to head first (always on SQLite so ``mol up`` just works;
    on Postgres unless MOL_CATALOG_MIGRATE=false). With ``workers > 1`` uvicorn runs
    ``app_factory`` in each worker, which reads the settings from the environment, so
    the overrides are exported there. Auth off is refused on a non-loopback address
    unless ``insecure`` (:class:`InsecureBind`).
    """
    import uvicorn

    overrides: dict[str, str] = {}
    if db is not None:
        overrides["MOL_CATALOG_DB_URL"] = db
    if blobs is not None:
        overrides["MOL_CATALOG_BLOB_URL"] = blobs
    if auth is not None:
        overrides["MOL_CATALOG_AUTH"] = "on" if auth else "off"
    for key, value in (("LOG_LEVEL", log_level), ("LOG_FORMAT", log_format),
                       ("ACCESS_LOG", None if access_log is None else str(access_log))):
        if value is not None:
            overrides[f"MOL_CATALOG_{key}"] = value
    os.environ.update(overrides)
    settings = CatalogSettings()
    exposed = check_exposure(host, settings.auth_enabled, insecure)
    logs = log_config(settings.log_level, settings.log_format)
    logging.config.dictConfig(logs)
    if migrate_db is None:
        migrate_db = settings.migrate
    if migrate_db or is_sqlite(settings.db_url):
        migrate(settings.db_url)
    log = logging.getLogger("mol_catalog")
    line = startup_line(host, port, workers, settings.db_url, settings.blob_url,
                        settings.auth_enabled, exposed)
    if exposed:
        log.warning("authentication is OFF on %s (--insecure-no-auth): anyone who can reach "
                    "port %d is admin and can publish, yank, delete and create tokens", host,
                    port)
        log.warning(line)
    else:
        log.info(line)
    options: dict[str, Any] = {"host": host, "port": port, "http": "httptools", "loop": "uvloop",
               "lifespan": "on", "log_config": logs, "log_level": settings.log_level,
               "access_log": settings.access_log}
    if workers > 1:
        uvicorn.run("mol_catalog.app:app_factory", factory=True, workers=workers, **options)
    else:
        from mol_catalog.app import create_app
        from mol_catalog.runtime import tune_gc

        app = create_app(settings)
        tune_gc()
        uvicorn.run(app, **options)
