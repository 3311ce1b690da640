"""The test engine itself: failures are loud and leave no process behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mol_testkit.engine import EngineError, find_engine_venv, running_engine

pytestmark = pytest.mark.e2e


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


def test_an_engine_that_dies_is_reported_with_its_log(engine_venv, demo_assets, tmp_path):
    broken = tmp_path / "broken-model"
    shutil.copytree(demo_assets.base, broken)
    config = json.loads((broken / "config.json").read_text())
    config["architectures"] = ["NoSuchModelForCausalLM"]
    (broken / "config.json").write_text(json.dumps(config))
    with (
        pytest.raises(EngineError, match="exited with code") as info,
        running_engine(engine_venv, broken, log_dir=tmp_path / "logs", timeout=180),
    ):
        pytest.fail("a broken model must not become healthy")
    assert "last lines" in str(info.value)
    assert str(tmp_path / "logs") in str(info.value)
    assert _processes_mentioning(str(broken)) == []


def test_missing_pieces_are_errors_not_skips(engine_venv, demo_assets, tmp_path):
    with (
        pytest.raises(EngineError, match=r"no config\.json"),
        running_engine(engine_venv, tmp_path),
    ):
        pass
    with (
        pytest.raises(EngineError, match=r"no adapter_config\.json"),
        running_engine(engine_venv, demo_assets.base, lora_modules={"x": tmp_path}),
    ):
        pass
    with pytest.raises(EngineError, match="no bin/python"), running_engine(tmp_path, tmp_path):
        pass


def test_a_bad_engine_venv_setting_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("MOL_ENGINE_VENV", str(tmp_path))
    with pytest.raises(EngineError, match="is not a venv"):
        find_engine_venv()
