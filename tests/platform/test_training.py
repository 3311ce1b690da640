"""Hand-off from training: a real few-step PEFT LoRA run of the tiny demo Llama on the
CPU (the engine venv's torch, transformers and peft, in a subprocess) publishes its two
checkpoints to a catalog this test starts: two versions, the second a child of the
first, both compatible with the base, with the run's lineage in their source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mol_platform.apps.demo import build_demo
from mol_platform.apps.training import (
    CheckpointPublisher,
    args_digest,
    catalog_callback,
    parse_source,
    training_source,
)
from mol_platform.clients.catalog import CatalogClient
from mol_platform.contract.refs import RefError
from mol_testkit.engine import find_engine_venv
from tests.catalog.conftest import catalog_server

__all__ = ["catalog_server"]  # the fixture: a real catalog (uvicorn, SQLite, auth off)
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "training" / "train_tiny_lora.py"
DATASET = "sha256:" + "5e" * 32


@pytest.mark.timeout(600)
def test_two_checkpoints_become_two_versions_with_lineage(catalog_server: str,
                                                          tmp_path: Path) -> None:
    demo = build_demo(tmp_path / "demo", seed=0)
    with CatalogClient(catalog_server) as client:
        revision = client.register_base(demo.base, "tiny-llama").revision
        client.set_profile("cpu", base_model=f"tiny-llama@{revision}", max_lora_rank=16,
                           max_loras=2, engine="vllm==0.32.0")
    venv = find_engine_venv()
    paths = [str(ROOT / p) for p in ("platform",)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "CUDA_VISIBLE_DEVICES": "",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    for key in ("MOL_CATALOG_URL", "MOL_CATALOG_TOKEN"):
        env.pop(key, None)
    proc = subprocess.run([str(venv / "bin" / "python"), str(SCRIPT), str(demo.base),
                           str(tmp_path / "run"), catalog_server, DATASET],
                          capture_output=True, text=True, env=env, timeout=540, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    published = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [(p["version"], p["created"]) for p in published] == [(1, True), (2, True)]
    assert (tmp_path / "run" / "checkpoint-2" / "adapter_model.safetensors").is_file()
    with CatalogClient(catalog_server) as client:
        first, second = client.get_version("lab/tune", 1), client.get_version("lab/tune", 2)
        assert first.parent is None
        assert second.parent == 1
        assert first.digest != second.digest  # training moved the weights
        for v in (first, second):
            assert v.base == f"tiny-llama@{revision}"
            assert {f.path for f in v.files} == {"adapter_config.json",
                                                 "adapter_model.safetensors"}
            assert v.verdicts["cpu"].compatible, v.verdicts["cpu"].reasons
            verdict = client.resolve(f"lab/tune@v{v.version}", "cpu").verdict
            assert verdict is not None
            assert verdict.compatible
        lineage = [parse_source(v.source or "") for v in (first, second)]
        assert [x["step"] for x in lineage] == ["2", "4"]
        assert {x["dataset"] for x in lineage} == {DATASET}
        assert lineage[0]["args"] == lineage[1]["args"]
        assert lineage[0]["args"].startswith("sha256:")
        assert lineage[0]["run"] == "run"
        assert client.resolve("lab/tune@candidate").version == 2
        assert (second.rank, sorted(second.target_modules)) == (
            8, ["self_attn.q_proj", "self_attn.v_proj"])


def test_the_module_imports_without_transformers() -> None:
    """The runtime wheel has no transformers: importing the module works, making the
    callback says what to install."""
    code = ("import sys; sys.modules['transformers'] = None\n"
            "from mol_platform.apps import training\n"
            "try:\n    training.catalog_callback('a/b', base='tiny')\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "platform")})
    assert "needs transformers: pip install transformers peft" in out.stdout


def test_lineage_fields_round_trip_and_ignore_where_the_run_writes() -> None:
    a = args_digest({"learning_rate": 0.01, "output_dir": "/a", "logging_dir": "/a/runs"})
    b = args_digest({"output_dir": "/b", "learning_rate": 0.01})
    assert a == b != args_digest({"learning_rate": 0.02})
    source = training_source("my run", 40, a, DATASET)
    assert parse_source(source) == {"run": "my%20run", "step": "40", "args": a,
                                    "dataset": DATASET}
    assert parse_source(training_source("r", 1, a, None)) == {"run": "r", "step": "1",
                                                              "args": a}
    assert parse_source("git://example/repo") == {}


def test_publisher_checks_its_settings() -> None:
    with pytest.raises(RefError):
        CheckpointPublisher("not-a-ref", base="tiny")
    with pytest.raises(RefError):
        CheckpointPublisher("lab/tune", base="tiny", alias="Bad Alias")
    with pytest.raises(RefError):
        CheckpointPublisher("lab/tune", base="tiny", dataset_digest="md5:abc")
    with pytest.raises(ImportError):
        catalog_callback("lab/tune", base="tiny")  # this venv has no transformers
