"""Build the demo's real experts: train each by its recipe once, publish it with lineage.

A trained adapter lives in the cache under a key made of the base's, the data's and the
recipe's digests (:func:`mol_platform.apps.experts.recipe.adapter_key`): a later start
reuses it, and a change to the data or the recipe trains a new one. The adapters this
project ships (``trained/<expert>``, trained by the same recipe) seed the cache when their
recorded digests are the current ones, so a first start serves real experts without
training; a user's own change to the data trains in the background instead.

Training runs in the engine's venv (torch and peft live there, not in the platform's
runtime), one process per expert, its progress read line by line from its stdout.
Publishing goes through the training hand-off (:class:`CheckpointPublisher`), so each
version carries its lineage: ``mol-train://<run>/checkpoint-<steps>?args=<recipe>&dataset=
<data digest>``, tagged ``expert``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mol_platform.apps.experts.base import BASE_NAME, MARKER
from mol_platform.apps.experts.recipe import (
    DATA_ROOT,
    RECIPES,
    Recipe,
    adapter_key,
    data_digest,
    with_steps,
)
from mol_platform.apps.training import CheckpointPublisher
from mol_platform.contract.catalog_models import Published

SHIPPED = Path(__file__).parent / "trained"
TRAINING = "training.json"
Say = Callable[[str], None]


class ExpertBuildError(RuntimeError):
    """Training an expert failed; the message says how, with the trainer's last lines."""


def base_digest(base: Path) -> str:
    """The base's digest as lineage records it: its source wheel's sha256 (the folder is
    a deterministic conversion of it)."""
    marker = base / MARKER
    if not marker.is_file():
        raise ExpertBuildError(f"{base} is not a converted base (no {MARKER})")
    return f"sha256:{json.loads(marker.read_text())['sha256']}"


def lineage(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / TRAINING).read_text()))


def current(folder: Path, expert: str, base: str, recipe: Recipe,
            data_root: Path = DATA_ROOT) -> bool:
    """Whether ``folder`` holds ``expert`` trained on this base, data and recipe."""
    try:
        seen = lineage(folder)
    except (OSError, ValueError):
        return False
    return (seen.get("expert") == expert and seen.get("base_digest") == base
            and seen.get("data_digest") == data_digest(expert, data_root)
            and seen.get("recipe_digest") == recipe.digest()
            and (folder / "adapter_model.safetensors").is_file())


def cache_folder(cache: Path, expert: str, base: str, recipe: Recipe,
                 data_root: Path = DATA_ROOT) -> Path:
    return cache / "experts" / f"{expert}-{adapter_key(base, expert, recipe, data_root)}"


def _copy_whole(source: Path, target: Path) -> None:
    aside = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shutil.rmtree(aside, ignore_errors=True)
    shutil.copytree(source, aside)
    shutil.rmtree(target, ignore_errors=True)
    aside.rename(target)


def train_expert(expert: str, base: Path, engine_python: Path, cache: Path, *,
                 say: Say = print, steps: int | None = None, shipped: Path = SHIPPED,
                 data_root: Path = DATA_ROOT) -> Path:
    """The adapter folder of ``expert`` for ``base``: from the cache, from the shipped
    copy when it is current, else trained now (``steps`` overrides the recipe's, for
    tests; such an adapter is keyed apart)."""
    recipe = with_steps(RECIPES[expert], steps)
    digest = base_digest(base)
    folder = cache_folder(cache, expert, digest, recipe, data_root)
    if current(folder, expert, digest, recipe, data_root):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    if current(shipped / expert, expert, digest, recipe, data_root):
        _copy_whole(shipped / expert, folder)
        return folder
    say(f"training the {expert} expert ({recipe.steps} steps on the CPU) ...")
    command = [str(engine_python), "-m", "mol_platform.apps.experts.train",
               "--base", str(base), "--base-digest", digest, "--expert", expert,
               "--out", str(folder), "--data", str(data_root)]
    if steps is not None:
        command += ["--steps", str(steps)]
    # Passive OpenMP threads: training shares the CPU with a serving engine, and
    # spinning threads would slow both.
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false",
           **_this_tree()}
    log_path = cache / "experts" / f"{expert}.log"
    with log_path.open("w") as log, subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            _progress(expert, line, say)
        code = proc.wait()
    if code != 0 or not current(folder, expert, digest, recipe, data_root):
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise ExpertBuildError(f"training the {expert} expert failed (exit {code}); "
                               f"its log {log_path} ends:\n{tail}")
    seconds = lineage(folder).get("seconds")
    say(f"the {expert} expert is trained ({seconds} s)")
    return folder


SHIPPED_FILES = ("adapter_config.json", "adapter_model.safetensors", TRAINING)


def ship(folder: Path, expert: str, shipped: Path = SHIPPED) -> Path:
    """Copy a trained adapter (its two PEFT files and its lineage) to where the project
    ships it, replacing the copy there whole."""
    staged = shipped / f".{expert}.staged"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    for name in SHIPPED_FILES:
        shutil.copy2(folder / name, staged / name)
    shutil.rmtree(shipped / expert, ignore_errors=True)
    staged.rename(shipped / expert)
    return shipped / expert


def _this_tree() -> dict[str, str]:
    """From a source checkout, the trainer runs this tree's code (the engine venv's
    installed copy is refreshed only by scripts/engine-venv.sh); from an installed
    platform, the engine venv's own copy of the same release."""
    import mol_platform

    source = Path(mol_platform.__file__).resolve().parents[1]
    if source.name in ("site-packages", "dist-packages"):
        return {}
    return {"PYTHONPATH": str(source)}


def _progress(expert: str, line: str, say: Say) -> None:
    try:
        row = json.loads(line)
    except ValueError:
        return
    if not isinstance(row, dict) or "step" not in row:
        return
    if row["step"] == 0:
        say(f"  {expert}: {row.get('prepared')} examples prepared ({row.get('elapsed')} s)")
    elif row["step"] == row.get("steps") or row["step"] % 10 == 0:
        say(f"  {expert}: step {row['step']}/{row.get('steps')}, loss {row.get('loss')} "
            f"({row.get('elapsed')} s)")


def publish_expert(folder: Path, adapter: str, *, catalog_url: str | None = None,
                   token: str | None = None, alias: str | None = "stable") -> Published:
    """Publish a trained expert as ``adapter`` (``NS/NAME``) with its lineage; the same
    adapter again answers with its existing version."""
    seen = lineage(folder)
    publisher = CheckpointPublisher(adapter, BASE_NAME, catalog_url, token,
                                    dataset_digest=seen["data_digest"], alias=alias,
                                    tags=["expert"])
    run = f"{seen['expert']}-{str(seen['recipe_digest']).removeprefix('sha256:')[:12]}"
    published = publisher.publish(folder, int(seen["recipe"]["steps"]), run, seen["recipe"])
    assert published is not None  # strict: a failure raised
    return published
