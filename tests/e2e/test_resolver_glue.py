"""The resolver plugin inside the engine venv, against vLLM's own registry (no engine
start): registered only with MOL_CATALOG_URL, and its answers are vLLM's types."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# One process (importing vLLM takes a while): the entry point as vLLM calls it, first
# without MOL_CATALOG_URL, then with it.
PROBE = """
import asyncio, logging, os, sys
import mol_platform.apps.engine_launcher  # the CPU build's version lookup
from importlib.metadata import entry_points
from vllm.lora.resolver import LoRAResolverRegistry
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
(ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "mol_resolver"]
ep.load()()
print("unset:", sorted(LoRAResolverRegistry.get_supported_resolvers()))
os.environ.update(MOL_CATALOG_URL="http://127.0.0.1:9", MOL_SERVING_PROFILE="p")
ep.load()()
print("set:", sorted(LoRAResolverRegistry.get_supported_resolvers()))
resolver = LoRAResolverRegistry.get_resolver("mol-catalog")
print("mutable:", asyncio.run(resolver.resolve_lora("tiny-llama", "demo/chat@stable")))
print("unreachable:", asyncio.run(resolver.resolve_lora("tiny-llama", "demo/chat@v1")))
"""


def test_plugin_registers_only_with_a_catalog_url_and_answers_none_when_refusing(
        engine_venv: Path, tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MOL_")}
    done = subprocess.run([str(engine_venv / "bin" / "python"), "-c", PROBE],
                          env={**clean, "MOL_ADAPTER_CACHE_DIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    lines = {k: v for k, _, v in (ln.partition(": ") for ln in out.splitlines())}
    assert "MOL_CATALOG_URL is not set; not registering" in out
    assert "'mol-catalog'" not in lines["unset"]
    assert "'mol-catalog'" in lines["set"]
    assert "mutable: None" in out
    assert "is a mutable reference" in out
    assert "unreachable: None" in out  # nothing cached, catalog down: refused, not raised
    assert "the catalog is unreachable and the adapter is not cached" in out
