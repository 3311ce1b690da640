"""``checkov`` (a Kubernetes policy scanner) in a cached venv of its own, and a scan.

checkov pins old boto3, packaging and networkx, so it never goes into the dev venv:
it lives in ``~/.cache/mol-platform/policy/checkov-<version>`` (``MOL_CACHE_DIR``
moves the cache), built on first use (about a minute) from the ``policy`` extra of
pyproject.toml and reused. Its Helm framework shells out to a ``helm`` binary, so
callers render manifests themselves and scan the folder with the Kubernetes framework.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mol_testkit.net import InfraError

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Finding:
    """One failed check on one resource of one scanned file."""

    check: str  # e.g. CKV_K8S_43
    name: str
    file: str  # relative to the scanned folder, without the leading "/"
    resource: str  # Kind.namespace.name


def version() -> str:
    """The checkov version pinned by the ``policy`` extra of pyproject.toml."""
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    for pin in data["project"]["optional-dependencies"]["policy"]:
        if pin.startswith("checkov=="):
            return str(pin.split("==", 1)[1])
    raise InfraError("pyproject.toml's policy extra must pin checkov==X.Y.Z")


def ensure_checkov() -> Path:
    """The cached venv's ``checkov`` executable, built when missing or broken (one
    builder at a time: a second caller waits on the lock, then reuses the venv)."""
    want = version()
    cache = Path(os.environ.get("MOL_CACHE_DIR", Path.home() / ".cache" / "mol-platform"))
    venv = cache / "policy" / f"checkov-{want}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f"checkov-{want}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(venv, want)


def _build(venv: Path, want: str) -> Path:
    exe = venv / "bin" / "checkov"
    if exe.exists():
        probe = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                               timeout=120, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == want:
            return exe
    print(f"checkov {want}: building its venv in {venv} (once)", file=sys.stderr)
    python = venv / "bin" / "python"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
                       check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"checkov=={want}"],
                       check=True)
    except subprocess.CalledProcessError as exc:
        raise InfraError(f"could not build the checkov venv in {venv}: {exc}") from exc
    return exe


def scan(folder: Path) -> list[Finding]:
    """Every failed Kubernetes check on the manifests under ``folder``."""
    run = subprocess.run([str(ensure_checkov()), "-d", str(folder), "--framework",
                          "kubernetes", "-o", "json", "--quiet", "--compact"],
                         capture_output=True, text=True, timeout=600, check=False)
    # Exit 1 means "checks failed"; anything else without JSON is checkov failing.
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError as exc:
        raise InfraError(f"checkov failed ({run.returncode}):\n{run.stderr[-4000:]}") from exc
    reports = report if isinstance(report, list) else [report]
    out = []
    for r in reports:
        if r.get("summary", {}).get("parsing_errors"):
            raise InfraError(f"checkov could not parse some manifests: {r['summary']}")
        for c in r.get("results", {}).get("failed_checks", []):
            out.append(Finding(c["check_id"], c["check_name"], c["file_path"].lstrip("/"),
                               c["resource"]))
    return out
