"""The benchmark's arithmetic and report writer (bench/_report.py), without any server."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPORT_PY = Path(__file__).resolve().parents[2] / "bench" / "_report.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report_under_test", REPORT_PY)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while building
    spec.loader.exec_module(module)
    return module


report = _load()


def test_percentile_interpolates_between_ranks() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert report.percentile(values, 0) == 10.0
    assert report.percentile(values, 100) == 40.0
    assert report.percentile(values, 50) == pytest.approx(25.0)
    assert report.percentile(values, 99) == pytest.approx(39.7)
    assert report.percentile([7.0], 99) == 7.0


def test_percentile_ignores_input_order() -> None:
    rng = random.Random(3)
    values = [rng.uniform(0, 100) for _ in range(1001)]
    shuffled = values[:]
    rng.shuffle(shuffled)
    assert report.percentile(shuffled, 50) == report.percentile(values, 50)
    # 1001 values: the median is exactly the 501st smallest.
    assert report.percentile(values, 50) == sorted(values)[500]


@pytest.mark.parametrize("q", [-1.0, 100.5])
def test_percentile_rejects_bad_input(q: float) -> None:
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        report.percentile([1.0], q)
    with pytest.raises(ValueError, match="empty"):
        report.percentile([], 50)


def test_ratio_and_target_follow_the_direction() -> None:
    latency = report.Row("p99", "ms", ours=4.0, mlflow=80.0, target=10.0)
    assert latency.ratio == pytest.approx(20.0)
    assert latency.met is True
    rate = report.Row("rps", "req/s", ours=1000.0, mlflow=125.0, target=1200.0, better="higher")
    assert rate.ratio == pytest.approx(8.0)
    assert rate.met is False
    assert report.Row("x", "ms", ours=None, mlflow=3.0).ratio is None
    assert report.Row("x", "ms", ours=1.0).met is None
    with pytest.raises(ValueError, match="better"):
        report.Row("x", "ms", ours=1.0, better="faster")


def test_table_has_every_column() -> None:
    table = report.render_table([
        report.Row("resolve p99", "ms", ours=4.0, mlflow=80.0, target=10.0),
        report.Row("publish", "adapters/s", ours=30.0, target=50.0, better="higher"),
    ])
    lines = table.splitlines()
    assert lines[0] == "| metric | ours | MLflow | ratio (x better) | target | met? |"
    assert lines[2] == "| resolve p99 | 4.00 ms | 80.0 ms | 20.0x | <= 10.0 ms | yes |"
    assert lines[3] == "| publish | 30.0 adapters/s | - | - | >= 50.0 adapters/s | **no** |"


def test_section_is_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nIntro.\n\n## Router\n\nrouter figures\n")
    report.write_section(doc, "catalog", "## Catalog\n\nfirst")
    report.write_section(doc, "catalog", "## Catalog\n\nsecond")
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nIntro.\n\n## Router\n\nrouter figures\n")
    assert "second" in text
    assert "first" not in text
    assert text.count("<!-- bench:catalog:begin -->") == 1
    report.write_section(doc, "router", "## Router v2")
    assert "second" in doc.read_text()


def test_section_writer_refuses_a_broken_file(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("<!-- bench:catalog:begin -->\nno end marker\n")
    with pytest.raises(ValueError, match="fix the file by hand"):
        report.write_section(doc, "catalog", "x")
    with pytest.raises(ValueError, match="section name"):
        report.markers("Catalog!")


def test_missing_file_is_created(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "benchmarks.md"
    report.write_section(doc, "catalog", "## Catalog")
    assert doc.read_text().startswith("# Benchmarks\n\n<!-- bench:catalog:begin -->\n## Catalog\n")
