"""MLflow Model Registry as the comparison: its venv, its server and its bulk load.

MLflow is heavy (~1 GB of dependencies, pins of its own), so it lives in a cached venv
outside the checkout, built on first use from the `bench` extra of pyproject.toml. The
registry is loaded through MLflow's own tables: the server creates its schema, one
model is created through its REST API, and that model's rows are the template for the
COPY of every other model, so the loaded rows have exactly the shape MLflow writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from _machine import Proc, pinned, wait_http
from _pg import (
    bulk_connection,
    chunked,
    copy_text,
    drop_for_load,
    esc,
    progress,
    restore_after_load,
)

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("MOL_BENCH_CACHE", Path.home() / ".cache/mol-platform/bench"))
TABLES = ("registered_models", "registered_model_tags", "model_versions",
          "registered_model_aliases")
PROBE = "probe-model"
VERSIONS = 3
ALIAS = "stable"
ALIAS_VERSION = 2


def pins() -> list[str]:
    """The `bench` extra of pyproject.toml: what the MLflow venv installs."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra: list[str] = data["project"]["optional-dependencies"]["bench"]
    return extra


def mlflow_version() -> str:
    for pin in pins():
        if pin.startswith("mlflow=="):
            return pin.split("==", 1)[1]
    raise RuntimeError("pyproject.toml's bench extra must pin mlflow==X.Y.Z")


def ensure_venv() -> Path:
    """The cached venv's python, created (a few minutes, once) when missing or broken."""
    version = mlflow_version()
    venv = CACHE / f"mlflow-{version}"
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import mlflow, psycopg2; print(mlflow.__version__)"]
    if python.exists():
        done = subprocess.run(probe, capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip() == version:
            return python
    progress(f"MLflow {version}: building its venv in {venv} (once; a few minutes)")
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pins()], check=True)
    subprocess.run(probe, check=True, capture_output=True)
    return python


def upgrade_schema(python: Path, url: str) -> None:
    """`mlflow db upgrade`: MLflow creates and migrates its own tables."""
    subprocess.run([str(python), "-m", "mlflow", "db", "upgrade", url], check=True,
                   capture_output=True)


def start_server(python: Path, url: str, port: int, workers: int, workdir: Path,
                 cores: str | None) -> Proc:
    """`mlflow server` on loopback: Postgres backend, no artifact proxy, no job runner."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # huey consumers: not the registry
    argv = [str(python), "-m", "mlflow", "server", "--backend-store-uri", url,
            "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
            "--no-serve-artifacts", "--default-artifact-root", str(workdir / "artifacts")]
    proc = Proc("mlflow server", pinned(argv, cores), env=env, log=workdir / "mlflow.log",
                cwd=workdir)
    wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=180)
    return proc


def _api(base: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{base}/api/2.0/mlflow/{path}", data=data,
                                 headers={"Content-Type": "application/json"},
                                 method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=30) as resp:
        result: dict[str, Any] = json.loads(resp.read() or b"{}")
        return result


def create_probe(base: str) -> None:
    """One model through the API: 3 versions, a tag, an alias (the row template)."""
    _api(base, "registered-models/create",
         {"name": PROBE, "description": "bench", "tags": [{"key": "base", "value": "b0"}]})
    for k in range(1, VERSIONS + 1):
        _api(base, "model-versions/create",
             {"name": PROBE, "source": f"s3://models/{PROBE}/{k}", "description": f"v{k}"})
    _api(base, "registered-models/alias", {"name": PROBE, "alias": ALIAS,
                                            "version": str(ALIAS_VERSION)})
    got = resolve_once(base, PROBE)
    if got != str(ALIAS_VERSION):
        raise RuntimeError(f"MLflow probe alias resolved to {got!r}, expected {ALIAS_VERSION}")


def resolve_once(base: str, name: str) -> str:
    query = urllib.parse.urlencode({"name": name, "alias": ALIAS})
    return str(_api(base, f"registered-models/alias?{query}")["model_version"]["version"])


def model_name(i: int) -> str:
    return f"model-{i:07d}"


def _template(conn: psycopg.Connection[tuple[object, ...]], table: str
              ) -> tuple[list[str], list[tuple[object, ...]]]:
    cur = conn.execute(f"SELECT * FROM {table} WHERE name = %s", (PROBE,))
    cols = [d.name for d in cur.description or ()]
    return cols, list(cur.fetchall())


def _render(value: object, name: str, i: int, col: str) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return esc(value.replace(PROBE, name))
    if isinstance(value, int) and col.endswith("_time"):
        return str(value + i)  # distinct, increasing timestamps like real traffic
    return esc(str(value))


def _lines(cols: list[str], rows: list[tuple[object, ...]], n: int) -> Iterator[str]:
    for i in range(1, n + 1):
        name = model_name(i)
        for row in rows:
            yield "\t".join(_render(v, name, i, c) for c, v in zip(cols, row, strict=True)) + "\n"


def bulk_load(url: str, n: int) -> None:
    """COPY n models shaped like the probe's rows (the probe stays as model n+1)."""
    with bulk_connection(url) as conn:
        templates = {t: _template(conn, t) for t in TABLES}
        for table, (_, rows) in templates.items():
            if not rows:
                raise RuntimeError(f"MLflow wrote no {table} row for the probe model")
        saved = drop_for_load(conn, TABLES)
        for table in TABLES:
            cols, rows = templates[table]
            copy_text(conn, table, cols, chunked(_lines(cols, rows, n)), n * len(rows))
        restore_after_load(conn, saved, TABLES)


def paths_file(path: Path, n: int, sample: int, seed: int = 7) -> Path:
    """Request paths of the alias lookup for `sample` random models (wrk picks among them)."""
    import random

    rng = random.Random(seed)
    with path.open("w") as fh:
        for _ in range(min(sample, n)):
            query = urllib.parse.urlencode({"name": model_name(rng.randint(1, n)), "alias": ALIAS})
            fh.write(f"/api/2.0/mlflow/registered-models/alias?{query}\n")
    return path
