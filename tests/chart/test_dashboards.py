"""The Grafana dashboards: generated from deploy/grafana/dashboards.py, every query
filtered by the dashboard's variables, explicit panel ids, the LoRA fleet as a table.
(tests/chart/test_promql.py evaluates every query on a real Prometheus.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from .conftest import CHART, ROOT

FOLDER = CHART / "files" / "dashboards"
DASHBOARDS = sorted(p.stem for p in FOLDER.glob("*.json"))
# Constant thresholds drawn beside a series: no metric, nothing to filter.
CONSTANT = re.compile(r"vector\(\$[a-z_]+\)")
# Scraped from the operator, so labelled with the operator's namespace, not the
# MoLDeployment's: on a per-deployment dashboard only `deployment` filters them.
OPERATOR_SERIES = {"mol_operator_canary_transitions_total"}
# The catalog's, one for every deployment and perhaps in another namespace: a per-deployment
# dashboard shows it unfiltered.
CATALOG_SERIES = {"mol_catalog_unused_adapters", "mol_catalog_routing_labels_total"}
# Every metric a dashboard reads is the platform's (mol_) or vLLM's (vllm:).
METRIC = re.compile(r"\b((?:mol_|vllm:)[a-z0-9_:]*)(\{[^}]*\})?")


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FOLDER / f"{name}.json").read_text())
    return data


def _variables(board: dict[str, Any]) -> set[str]:
    return {v["name"] for v in board["templating"]["list"]}


def test_dashboards_are_generated_from_source() -> None:
    source = ROOT / "deploy" / "grafana" / "dashboards.py"
    run = subprocess.run([sys.executable, "-c",
                          "import json, runpy, sys; m = runpy.run_path(sys.argv[1]); "
                          "print(json.dumps(m['render']()))", str(source)],
                         capture_output=True, text=True, timeout=120, check=True)
    expected: dict[str, str] = json.loads(run.stdout)
    assert sorted(p.name for p in FOLDER.glob("*.json")) == sorted(expected)
    for file, text in expected.items():
        assert (FOLDER / file).read_text() == text, (
            f"{file} is stale: run python deploy/grafana/dashboards.py")


def test_the_six_dashboards_are_there() -> None:
    assert DASHBOARDS == ["mol-adapters", "mol-canary", "mol-catalog", "mol-lora-fleet",
                          "mol-operator", "mol-overview"]


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_query_honours_the_dashboards_variables(name: str) -> None:
    board = _load(name)
    variables = _variables(board)
    assert "namespace" in variables
    wanted = ["namespace"] + (["deployment"] if "deployment" in variables else [])
    queries = [(p["title"], t["expr"]) for p in board["panels"] for t in p["targets"]]
    queries += [(f"variable {v['name']}", v["query"]) for v in board["templating"]["list"]
                if v["type"] == "query" and v["name"] != "namespace"]
    assert queries
    for where, expr in queries:
        if CONSTANT.fullmatch(expr):
            continue
        selectors = METRIC.findall(expr)
        assert selectors, f"{name}: {where}: no metric in {expr!r}"
        # Every metric of the expression is filtered, not just the first one.
        for metric, selector in selectors:
            if metric in CATALOG_SERIES and name != "mol-catalog":
                continue
            for var in wanted:
                if var == "namespace" and metric in OPERATOR_SERIES and "deployment" in wanted:
                    continue
                if where != f"variable {var}":
                    assert f'{var}=~"${var}"' in selector, f"{name}: {where}: {metric}"


@pytest.mark.parametrize("name", DASHBOARDS)
def test_panels_have_explicit_unique_ids(name: str) -> None:
    ids = [p.get("id") for p in _load(name)["panels"]]
    assert None not in ids, f"{name}: a panel without an id"
    assert len(set(ids)) == len(ids), f"{name}: duplicate panel ids {ids}"


def test_lora_fleet_adapters_are_a_table_of_replicas() -> None:
    panel = _load("mol-lora-fleet")["panels"][0]
    assert panel["type"] == "table"
    assert panel["options"]["showHeader"] is True
    (target,) = panel["targets"]
    assert target["format"] == "table"
    assert target["instant"] is True
    assert "vllm:lora_requests_info" in target["expr"]
    (organize,) = [t for t in panel["transformations"] if t["id"] == "organize"]
    options = organize["options"]
    # The adapters live in labels: they become columns, the timestamp value is hidden.
    assert options["excludeByName"]["Value"] is True
    assert options["renameByName"]["running_lora_adapters"] == "Running adapters"
    assert set(options["indexByName"]) == set(options["renameByName"])
