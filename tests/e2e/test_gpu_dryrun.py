"""bench/gpu/run.sh: the dry run walks every step of the GPU check on the real CPU
engine and writes each figure; without a GPU the command stops at once (exit 2) and
says how to use --dry-run; a failed step keeps the figures and names the step.

GPU detection goes through ``MOL_GPU_SMI`` (the nvidia-smi to ask), so these tests
decide what the machine has, whatever it really has."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "gpu" / "run.sh"
# The dry run's plan (bench/gpu/plan.py DRY_RUN), restated so a change is noticed here.
RANKS = (8, 16)
COUNTS = (1, 2)
REPEATS = 2


def run(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(RUN), *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout, check=False, cwd=ROOT)


def fake_smi(tmp_path: Path, body: str) -> str:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(0o755)
    return str(smi)


@pytest.mark.parametrize(("smi_body", "reason"), [
    (None, "is not installed"),
    ("echo 'NVIDIA-SMI has failed because it could not communicate with the driver'; exit 9",
     "failed"),
    ("echo 'No devices were found'", "lists no GPU"),
])
def test_without_a_gpu_it_stops_at_once_with_exit_2(tmp_path: Path, smi_body: str | None,
                                                     reason: str) -> None:
    smi = str(tmp_path / "absent" / "nvidia-smi") if smi_body is None else fake_smi(tmp_path,
                                                                                  smi_body)
    out = tmp_path / "out"
    start = time.monotonic()
    done = run(["--out", str(out)], {"MOL_GPU_SMI": smi}, timeout=30)
    took = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert took < 5, f"the no-GPU path took {took:.1f} s"
    assert "no NVIDIA GPU here" in done.stderr
    assert reason in done.stderr
    assert "bench/gpu/run.sh --dry-run" in done.stderr
    assert not out.exists()  # nothing was started, nothing written


def test_bad_arguments_are_refused_with_exit_2(tmp_path: Path) -> None:
    done = run(["--frobnicate"], {}, timeout=30)
    assert done.returncode == 2
    assert "unknown argument '--frobnicate'" in done.stderr
    done = run(["--dry-run"], {"MOL_GPU_CHECK_BUDGET_S": "900"}, timeout=30)
    assert done.returncode == 2
    assert "MOL_GPU_CHECK_BUDGET_S" in done.stderr
    done = run(["--out"], {}, timeout=30)
    assert done.returncode == 2
    assert "--out needs a folder" in done.stderr


def test_a_failed_step_keeps_the_figures_and_names_the_step(tmp_path: Path) -> None:
    fake = tmp_path / "not-an-engine"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "python").write_text("")  # a venv without vLLM
    out = tmp_path / "out"
    done = run(["--dry-run", "--out", str(out)], {"MOL_ENGINE_VENV": str(fake)}, timeout=120)
    assert done.returncode == 1, done.stderr
    figures = json.loads((out / "gpu-check.json").read_text())
    assert figures["status"].startswith("failed (running: starting the catalog")
    assert "has no vLLM installed" in figures["status"]
    assert figures["build_s"] > 0
    assert "load_tiers" not in figures
    assert "status: failed" in (out / "gpu-check.md").read_text()


def check_tiers(tiers: dict[str, Any]) -> None:
    assert tiers["base_first_token_s"] > 0
    assert tiers["repeats"] == REPEATS
    assert [row["rank"] for row in tiers["by_rank"]] == list(RANKS)
    sizes = []
    for row in tiers["by_rank"]:
        for key in ("disk_s", "host_s", "resident_s", "load_api_s", "first_token_after_load_s"):
            assert row[key] > 0, (row["rank"], key)
        # From disk is the load call plus the first token after it, sample by sample.
        for total, host in zip(row["samples"]["disk_s"], row["samples"]["host_s"], strict=True):
            assert total > 0
            assert host > 0
        assert row["disk_s"] > row["first_token_after_load_s"]
        # The engine's own load counters say each tier was the tier claimed. (The CPU
        # build's times for host and resident differ within noise: not ordered here.)
        assert row["loads"] == {"disk": {"cpu": REPEATS, "gpu": REPEATS},
                                "host": {"cpu": 0, "gpu": REPEATS},
                                "resident": {"cpu": 0, "gpu": 0}}, row["loads"]
        sizes.append(row["adapter_bytes"])
    assert sizes == sorted(sizes)
    assert sizes[0] < sizes[-1]


def check_throughput(figures: dict[str, Any]) -> None:
    plan = figures["plan"]
    rows = {(r["target"], r["adapters"]): r for r in figures["throughput"]}
    assert set(rows) == {("engine", 0)} | {(t, n) for t in ("engine", "router") for n in COUNTS}
    for key, r in rows.items():
        assert r["errors"] == 0, (key, r["first_error"])
        assert r["requests"] == plan["requests"]
        assert r["output_tokens"] == plan["requests"] * plan["max_tokens"], key
        assert r["tokens_per_s"] > 0
        assert r["seconds"] > 0
        assert 0 < r["ttft_p50_s"] <= r["ttft_p99_s"]
    assert [o["adapters"] for o in figures["router_overhead"]] == list(COUNTS)
    for o in figures["router_overhead"]:
        direct, routed = rows[("engine", o["adapters"])], rows[("router", o["adapters"])]
        assert o["throughput_ratio"] == pytest.approx(
            routed["tokens_per_s"] / direct["tokens_per_s"], rel=1e-3)


@pytest.mark.e2e
def test_dry_run_writes_every_figure(tmp_path: Path, engine_venv: Path) -> None:
    out = tmp_path / "out"
    done = run(["--dry-run", "--out", str(out)],
               {"MOL_ENGINE_VENV": str(engine_venv), "MOL_GPU_SMI": str(tmp_path / "none")},
               timeout=480)
    assert done.returncode == 0, done.stderr[-4000:]
    figures = json.loads((out / "gpu-check.json").read_text())
    assert figures["status"] == "complete"
    assert figures["mode"] == "cpu-dry-run"
    assert "not performance figures" in figures["label"]
    assert figures["gpu"] is None
    assert figures["vllm_version"].startswith("0.32")
    assert figures["plan"]["ranks"] == list(RANKS)
    assert figures["plan"]["adapter_counts"] == list(COUNTS)
    assert all(v > 0 for v in figures["startup_s"].values())
    assert figures["published"] == max(COUNTS)
    check_tiers(figures["load_tiers"])
    check_throughput(figures)
    serve = figures["time_to_serve"]
    assert serve["runs"] == 2
    assert serve["max_s"] >= serve["p50_s"] > 0
    # The plugin's resolve and download happen inside the cold request.
    assert serve["p50_s"] > serve["resolve_p50_s"] + serve["fetch_p50_s"] > 0
    assert serve["warm_first_token_p50_s"] > 0
    assert len(serve["samples"]) == 2
    for log in ("catalog.log", "engine.log", "router.log"):
        assert (out / "logs" / log).stat().st_size > 0, log
    md = (out / "gpu-check.md").read_text()
    assert md.startswith("## GPU check (`bench/gpu/run.sh`)")
    assert "**CPU dry run" in md
    assert "not performance figures" in md
    for heading in ("### Adapter load time by tier", "### Throughput and TTFT",
                    "### Time to serve"):
        assert heading in md
    for rank in RANKS:
        assert f"\n| {rank} | " in md
