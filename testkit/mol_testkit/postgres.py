"""A throwaway PostgreSQL cluster on loopback for tests.

``initdb`` into a temp dir, then ``postgres`` as a child process on a free 127.0.0.1
port with durability switched off (fsync, synchronous_commit, full_page_writes), so it
starts in about two seconds. ``stop()`` is an immediate shutdown plus removal of the
dir (also at interpreter exit), and the server gets SIGKILL from the kernel if this
process dies without cleaning up (``setpriv --pdeathsig``) — so start the cluster
from a thread that outlives it (the main thread, as pytest fixtures do).
PostgreSQL refuses to run as root, so under root it runs as the ``postgres`` system
user (``nobody`` when absent); it listens on TCP 127.0.0.1 only (no Unix socket) with
password (scram) auth.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import psycopg
from psycopg import sql

from mol_testkit.net import DEPS_HINT, LOOPBACK, InfraError, free_port

SUPERUSER = "mol"
PREFERRED_MAJOR = "15"
_DRIVERS = {
    "psycopg": "postgresql+psycopg",
    "asyncpg": "postgresql+asyncpg",
    "psycopg2": "postgresql+psycopg2",
    None: "postgresql",
}
_SETTINGS = {
    "listen_addresses": f"'{LOOPBACK}'",
    "unix_socket_directories": "''",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "100",
    "max_wal_size": "256MB",
    "log_min_messages": "warning",
    "log_statement": "none",
    "timezone": "'UTC'",
}


def find_pg_bin() -> Path:
    """The directory holding initdb/pg_ctl: $MOL_PG_BIN, else /usr/lib/postgresql/15/bin,
    else the newest /usr/lib/postgresql/*/bin."""
    override = os.environ.get("MOL_PG_BIN")
    candidates = [Path(override)] if override else []
    root = Path("/usr/lib/postgresql")
    found = sorted(root.glob("*/bin/initdb"), key=lambda p: _major(p.parent.parent.name))
    preferred = root / PREFERRED_MAJOR / "bin"
    candidates += [preferred] + [p.parent for p in reversed(found)]
    for cand in candidates:
        if (cand / "initdb").is_file() and (cand / "pg_ctl").is_file():
            return cand
    raise InfraError(
        f"PostgreSQL server binaries (initdb, pg_ctl) not found in {root}/*/bin"
        f" or $MOL_PG_BIN: {DEPS_HINT}"
    )


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1


def _run_as_user() -> str | None:
    """The unprivileged user to run the server as when we are root, else None."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise InfraError("running as root and neither a `postgres` nor a `nobody` user exists")


class PostgresCluster:
    """One PostgreSQL server in a temp dir; ``start()`` then ``url(db)``; ``stop()`` always.

    Also a context manager. The superuser is ``mol`` with a random password.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """``settings`` are postgresql.conf entries that override the test defaults."""
        self.settings = {**_SETTINGS, **(settings or {})}
        self.bin_dir = bin_dir or find_pg_bin()
        self.port = port or free_port()
        self.host = LOOPBACK
        self.user = SUPERUSER
        self.password = secrets.token_hex(16)
        self.os_user = _run_as_user()
        self.base_dir: Path | None = None
        self._started = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: BinaryIO | None = None

    # -- lifecycle ---------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        if self.base_dir is None:
            raise InfraError("the cluster is not started")
        return self.base_dir / "data"

    @property
    def pid(self) -> int:
        """The postmaster's pid (setpriv execs it, so it is the process we started)."""
        if self._proc is None:
            raise InfraError("the cluster is not started")
        return self._proc.pid

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / "server.log"

    def start(self, timeout: float = 60.0) -> PostgresCluster:
        if self.base_dir is not None:
            raise InfraError("the cluster is already started")
        self.base_dir = Path(tempfile.mkdtemp(prefix="mol-pg-"))
        atexit.register(self.stop)
        try:
            self._init()
            self._log = self.log_file.open("wb")
            self._launch(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, timeout: float) -> None:
        self._proc = subprocess.Popen(
            self._argv("postgres", "-D", str(self.data_dir)),
            cwd=self.base_dir, env=self._env(), stdout=self._log, stderr=subprocess.STDOUT,
        )
        self._started = True
        self._wait_ready(timeout)

    def halt(self) -> None:
        """Stop the server as a crash or an outage would (immediate shutdown: clients'
        connections drop), keeping its files for ``resume()``."""
        proc, self._proc = self._proc, None
        if proc is None:
            raise InfraError("the cluster is not running")
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def resume(self, timeout: float = 60.0) -> None:
        """Start a halted server again on the same port and data."""
        if self._proc is not None or self.base_dir is None:
            raise InfraError("the cluster is not halted")
        self._launch(timeout)

    def _wait_ready(self, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise InfraError(f"postgres exited ({self._proc.returncode}):\n{self._log_tail()}")
            try:
                with psycopg.connect(self.url(driver=None), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise InfraError(f"postgres not ready in {timeout:.0f}s: {exc}\n"
                                     f"{self._log_tail()}") from exc
            time.sleep(0.05)

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError, InfraError):
            return self.log_file.read_text(errors="replace")[-2000:]
        return ""

    def _init(self) -> None:
        assert self.base_dir is not None
        pwfile = self.base_dir / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.os_user is not None:
            info = pwd.getpwnam(self.os_user)
            os.chown(self.base_dir, info.pw_uid, info.pw_gid)
            os.chown(pwfile, info.pw_uid, info.pw_gid)
        self._run(
            "initdb", "-D", str(self.data_dir), "-U", self.user, "--pwfile", str(pwfile),
            "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8",
            "--locale=C", "--no-sync", "--no-instructions",
        )
        pwfile.unlink()
        conf = "".join(f"{key} = {value}\n" for key, value in self.settings.items())
        conf += f"port = {self.port}\n"
        with (self.data_dir / "postgresql.conf").open("a") as fh:
            fh.write("\n# test cluster\n" + conf)
        (self.data_dir / "pg_hba.conf").write_text(
            f"host all all {LOOPBACK}/32 scram-sha-256\n"
        )

    def stop(self) -> None:
        """Stop the server (immediate mode) and remove its files; safe to call twice."""
        base, self.base_dir = self.base_dir, None
        if base is None:
            return
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGQUIT)  # immediate shutdown
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._started = False
        shutil.rmtree(base, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- commands ---------------------------------------------------------------

    def _argv(self, tool: str, *args: str) -> list[str]:
        """tool's argv, as the unprivileged user under root; the kernel kills it if we die."""
        argv = [str(self.bin_dir / tool), *args]
        if self.os_user is None:
            return ["setpriv", "--pdeathsig", "SIGKILL", "--", *argv]
        return [
            "setpriv", f"--reuid={self.os_user}", f"--regid={pwd.getpwnam(self.os_user).pw_gid}",
            "--init-groups", "--pdeathsig", "SIGKILL", "--", *argv,
        ]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if self.os_user is not None:
            env["HOME"] = str(self.base_dir)
        return env

    def _run(self, tool: str, *args: str) -> None:
        assert self.base_dir is not None
        proc = subprocess.run(
            self._argv(tool, *args), cwd=self.base_dir, env=self._env(),
            capture_output=True, text=True, timeout=120, check=False,
        )
        if proc.returncode != 0:
            raise InfraError(
                f"{tool} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )

    # -- databases --------------------------------------------------------------

    def url(self, dbname: str = "postgres", driver: str | None = "psycopg") -> str:
        """A SQLAlchemy URL (``postgresql+psycopg://...``); driver None gives a libpq URL,
        also "asyncpg" and "psycopg2"."""
        if driver not in _DRIVERS:
            raise ValueError(f"unknown driver {driver!r}; use one of {sorted(map(str, _DRIVERS))}")
        if not self._started:
            raise InfraError("the cluster is not started")
        scheme = _DRIVERS[driver]
        return f"{scheme}://{self.user}:{self.password}@{self.host}:{self.port}/{dbname}"

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit psycopg connection as the superuser (close it, or use ``with``)."""
        return psycopg.connect(self.url(dbname, driver=None), autocommit=True)

    def execute(self, statement: str | sql.Composed, dbname: str = "postgres") -> None:
        with self.connect(dbname) as conn:
            conn.execute(statement)

    def create_database(self, name: str, extensions: Iterable[str] = ()) -> str:
        """Create database ``name`` (with the given extensions, e.g. ``pg_trgm``); its URL."""
        _check_identifier(name)
        self.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        for ext in extensions:
            self.enable_extension(name, ext)
        return self.url(name)

    def enable_extension(self, dbname: str, extension: str) -> None:
        _check_identifier(extension)
        stmt = sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(extension))
        self.execute(stmt, dbname)

    def drop_database(self, name: str) -> None:
        """Drop ``name`` even while clients are connected (``WITH (FORCE)``)."""
        _check_identifier(name)
        stmt = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        self.execute(stmt)

    def databases(self) -> list[str]:
        with self.connect() as conn:
            rows = conn.execute("SELECT datname FROM pg_database WHERE NOT datistemplate")
            return sorted(str(row[0]) for row in rows)


def fresh_database(
    cluster: PostgresCluster,
    prefix: str = "test",
    extensions: Sequence[str] = ("pg_trgm",),
    driver: str | None = "psycopg",
) -> str:
    """Create a uniquely named database (``<prefix>_<hex>``) and return its URL.

    The database lives until the cluster stops; drop it earlier with
    ``cluster.drop_database(make_url(url).database)`` when a suite makes many.
    """
    clean = re.sub(r"[^a-z0-9_]", "_", prefix.lower())[:40] or "test"
    name = f"{clean}_{uuid.uuid4().hex[:10]}"
    cluster.create_database(name, extensions)
    return cluster.url(name, driver=driver)


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,62}$")


def _check_identifier(name: str) -> None:
    if not _IDENT.match(name):
        raise ValueError(
            f"bad database/extension name {name!r}: use letters, digits, _ or - (max 63)"
        )
