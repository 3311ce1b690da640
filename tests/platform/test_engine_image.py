"""The default engine image is the project's own (vLLM pinned plus the resolver plugin,
built by deploy/images/engine.Dockerfile), named by tag, and runs as a non-root user."""

from __future__ import annotations

import re
from pathlib import Path

from mol_operator.builders.common import RUN_AS
from mol_operator.builders.engine import ENGINE_HOME
from mol_platform.contract.spec import EngineSpec

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "images" / "engine.Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    lines = [ln.strip() for ln in DOCKERFILE.read_text().splitlines()]
    out = []
    for line in lines:
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest))
    return out


def test_default_engine_image_is_pinned_and_is_the_dockerfiles() -> None:
    image = EngineSpec().image
    repo, _, tag = image.rpartition(":")
    assert repo == "ghcr.io/mol-platform/vllm-mol"
    assert tag
    assert tag != "latest"
    # The tag is the vLLM version the Dockerfile builds on (the serving profile's engine).
    vllm = next(rest for word, rest in _instructions()
                if word == "ARG" and rest.startswith("VLLM_IMAGE="))
    assert vllm.endswith(f":v{tag}"), (vllm, tag)
    assert f"-t {image} ." in DOCKERFILE.read_text()


def test_engine_image_runs_as_a_non_root_user() -> None:
    users = [rest for word, rest in _instructions() if word == "USER"]
    assert users, "the engine image must name a non-root USER"
    uid = users[-1].split(":")[0]
    assert re.fullmatch(r"[0-9]+", uid), users[-1]
    assert int(uid) > 0
    # The operator runs engines as that uid and mounts emptyDirs at the image's HOME.
    assert int(uid) == RUN_AS
    env = " ".join(rest for word, rest in _instructions() if word == "ENV")
    assert f"HOME={ENGINE_HOME}" in env
