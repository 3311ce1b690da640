"""A real catalog process on the embedded default, for tests and benchmarks.

Started exactly as ``mol up`` starts it (``mol catalog serve`` on SQLite and a blob
folder), on a free loopback port; ``stop()``/``start()`` take it away and bring it
back on the same port and data (the "catalog unreachable" cases).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from mol_platform.apps.procs import start_group, stop_process_group
from mol_platform.apps.up.supervisor import Service, catalog_argv, wait_healthy
from mol_testkit.net import free_port


class LiveCatalog:
    def __init__(self, data_dir: Path, port: int | None = None,
                 admin_token: str | None = None, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_token = admin_token
        self.env = env or {}  # MOL_CATALOG_* settings beyond the defaults
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, **self.env}
        if self.admin_token:
            env["MOL_CATALOG_ADMIN_TOKEN"] = self.admin_token
        argv = catalog_argv("127.0.0.1", self.port, self.data_dir,
                            auth=self.admin_token is not None)
        svc = Service("catalog", argv, f"{self.url}/healthz",
                      log_path=self.data_dir / "catalog.log")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        svc.proc = self.proc = start_group(argv, env=env, log_path=svc.log_path)
        wait_healthy(svc, timeout=60)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc)
            self.proc = None


@contextlib.contextmanager
def running_catalog(data_dir: Path, *, admin_token: str | None = None) -> Iterator[LiveCatalog]:
    catalog = LiveCatalog(data_dir, admin_token=admin_token)
    try:
        catalog.start()
        yield catalog
    finally:
        catalog.stop()
