"""Grafana dashboards of MoL Platform, built with grafana-foundation-sdk.

The JSON the chart ships (``charts/mol-platform/files/dashboards/*.json``) is generated
from this file; edit here, then run ``python deploy/grafana/dashboards.py`` (a test
fails when the committed JSON is stale). Every query names only metrics the platform
exports (docs/design.md) or vLLM's own, so the chart's tests can evaluate each one against a
real Prometheus.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    VariableRefresh,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

OUT = Path(__file__).resolve().parents[2] / "charts" / "mol-platform" / "files" / "dashboards"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
# Every query of a dashboard carries its variables' selectors: Prometheus adds
# `namespace` to every scraped series (the ServiceMonitor's), the router and the engine
# monitor `deployment`.
NS = 'namespace=~"$namespace"'
DEP = f'{NS},deployment=~"$deployment"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False  # one row per series, labels as columns


def _target(q: Query, ref: str) -> prometheus.Dataquery:
    t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DS)
    if q.legend:
        t = t.legend_format(q.legend)
    if q.table:
        t = t.format(PromQueryFormat.TABLE)
    return t.instant() if q.instant else t.range()


PanelBuilder = timeseries.Panel | stat.Panel | table.Panel


def _panel(kind: Callable[[], PanelBuilder], title: str, unit: str, queries: list[Query],
           w: int = 12, h: int = 8) -> PanelBuilder:
    p = kind().title(title).unit(unit).datasource(DS).height(h).span(w)
    for i, q in enumerate(queries):
        p = p.with_target(_target(q, chr(ord("A") + i)))
    return p


def ts(title: str, unit: str, *queries: Query, w: int = 12) -> PanelBuilder:
    return _panel(timeseries.Panel, title, unit, list(queries), w)


def quantiles(metric: str, by: str, selector: str, qs: tuple[float, ...] = (0.5, 0.95)
              ) -> list[Query]:
    """``histogram_quantile`` per ``by`` labels, one query per quantile."""
    labels = "{{" + "}} {{".join(by.split(", ")) + "}}"
    return [Query(f"histogram_quantile({q}, sum by (le, {by}) "
                  f"(rate({metric}_bucket{{{selector}}}[{RATE}])))", f"p{int(q * 100)} {labels}")
            for q in qs]


def _base(uid: str, title: str, tags: list[str], ns_metric: str) -> dashboard.Dashboard:
    """A dashboard with the data source and namespace variables (``ns_metric`` lists
    the namespaces that have the dashboard's data)."""
    d = (dashboard.Dashboard(title).uid(uid).tags(["mol-platform", *tags]).refresh("30s")
         .time("now-1h", "now").timezone("browser").editable())
    d = d.with_variable(dashboard.DatasourceVariable("datasource").label("Data source")
                        .type("prometheus"))
    return d.with_variable(
        dashboard.QueryVariable("namespace").label("Namespace").datasource(DS)
        .query(f"label_values({ns_metric}, namespace)").multi(True).include_all(True)
        .all_value(".*").refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))


def _deployment_var(d: dashboard.Dashboard, metric: str = "mol_router_requests_total"
                    ) -> dashboard.Dashboard:
    return d.with_variable(
        dashboard.QueryVariable("deployment").label("MoLDeployment").datasource(DS)
        .query(f"label_values({metric}{{{NS}}}, deployment)").multi(True).include_all(True)
        .all_value(".*").refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))


def _with_panels(d: dashboard.Dashboard, panels: list[PanelBuilder]) -> dashboard.Dashboard:
    """Add ``panels`` with explicit ids (1, 2, ...): links and alerts that name a panel
    by id keep working when panels are added, and Grafana never renumbers them."""
    for i, p in enumerate(panels, start=1):
        d = d.with_panel(p.id(i))
    return d


def overview() -> dashboard.Dashboard:
    req = "mol_router_requests_total"
    d = _deployment_var(_base("mol-overview", "MoL overview", ["router"], req))
    panels = [
        ts("Requests/s by expert and adapter version", "reqps",
           Query(f"sum by (expert, version) (rate({req}{{{DEP}}}[{RATE}]))",
                 "{{expert}} v{{version}}")),
        ts("Requests/s by adapter", "reqps",
           Query(f"sum by (adapter, version) (rate({req}{{{DEP}}}[{RATE}]))",
                 "{{adapter}} v{{version}}")),
        ts("Error rate (5xx) by expert", "percentunit",
           Query(f'sum by (expert) (rate({req}{{{DEP},code=~"5.."}}[{RATE}])) / '
                 f"sum by (expert) (rate({req}{{{DEP}}}[{RATE}]))", "{{expert}}")),
        ts("Latency p50 / p95 by expert and version", "s",
           *quantiles("mol_router_request_duration_seconds", "expert, version", DEP)),
        ts("Time to first token p50 / p95", "s",
           *quantiles("mol_router_time_to_first_token_seconds", "expert, version", DEP)),
        ts("Route decisions by mode", "reqps",
           Query(f"sum by (mode, expert) "
                 f"(rate(mol_router_route_decisions_total{{{DEP}}}[{RATE}]))",
                 "{{mode}} -> {{expert}}")),
        ts("Handoffs", "reqps",
           Query(f"sum by (from, to) (rate(mol_router_handoffs_total{{{DEP}}}[{RATE}]))",
                 "{{from}} -> {{to}}")),
        ts("Tokens/s by tenant", "short",
           Query(f"sum by (tenant, kind) (rate(mol_router_tokens_total{{{DEP}}}[{RATE}]))",
                 "{{tenant}} {{kind}}")),
        ts("Pending requests and ready engines", "short",
           Query(f"sum by (deployment) (mol_router_pending_requests{{{DEP}}})",
                 "pending {{deployment}}"),
           Query(f"min by (deployment) (mol_router_ready_endpoints{{{DEP}}})",
                 "ready {{deployment}}")),
        ts("Rate-limited requests (429)", "reqps",
           Query(f'sum by (deployment) (rate({req}{{{DEP},code="429"}}[{RATE}]))',
                 "{{deployment}}")),
    ]
    return _with_panels(d, panels)


def canary() -> dashboard.Dashboard:
    d = _deployment_var(_base("mol-canary", "MoL canary", ["canary"],
                             "mol_router_requests_total"))
    d = d.with_variable(
        dashboard.QueryVariable("expert").label("Expert").datasource(DS)
        .query(f"label_values(mol_canary_weight{{{DEP}}}, expert)")
        .multi(True).include_all(True).all_value(".*"))
    for name, default, label in (("max_error_rate", "0.02", "analysis.maxErrorRate"),
                                 ("max_latency_ratio", "1.25", "analysis.maxLatencyRatio")):
        d = d.with_variable(dashboard.TextBoxVariable(name).label(label).default_value(default))
    sel = f'{DEP},expert=~"$expert"'
    req = "mol_router_requests_total"
    lat = "mol_router_request_duration_seconds"
    p95 = (f"histogram_quantile(0.95, sum by (le, expert, version) "
           f"(rate({lat}_bucket{{{sel}}}[{RATE}])))")
    panels = [
        ts("Canary weight (% of the expert's traffic)", "percent",
           Query(f"max by (deployment, expert) (mol_canary_weight{{{sel}}})",
                 "{{deployment}}/{{expert}}"), w=24),
        ts("Error rate by version, against the analysis threshold", "percentunit",
           Query(f'sum by (expert, version) (rate({req}{{{sel},code=~"5.."}}[{RATE}])) / '
                 f"sum by (expert, version) (rate({req}{{{sel}}}[{RATE}]))",
                 "{{expert}} v{{version}}"),
           Query("vector($max_error_rate)", "maxErrorRate")),
        ts("Mean latency by version", "s",
           Query(f"sum by (expert, version) (rate({lat}_sum{{{sel}}}[{RATE}])) / "
                 f"sum by (expert, version) (rate({lat}_count{{{sel}}}[{RATE}]))",
                 "{{expert}} v{{version}}")),
        ts("p95 latency by version", "s", *quantiles(lat, "expert, version", sel, (0.95,))),
        ts("Requests/s by version", "reqps",
           Query(f"sum by (expert, version) (rate({req}{{{sel}}}[{RATE}]))",
                 "{{expert}} v{{version}}")),
        ts("Slowest/fastest version p95 ratio, against the analysis threshold", "none",
           Query(f"max by (expert) ({p95}) / min by (expert) ({p95})", "{{expert}}"),
           Query("vector($max_latency_ratio)", "maxLatencyRatio")),
        # The operator's series carry its own namespace, so only the deployment filters.
        ts("Canary transitions (1h)", "short",
           Query('sum by (expert, result) (increase(mol_operator_canary_transitions_total'
                 '{deployment=~"$deployment",expert=~"$expert"}[1h]))',
                 "{{expert}} {{result}}")),
        *_head_canary_panels(),
    ]
    return _with_panels(d, panels)


def _head_canary_panels() -> list[PanelBuilder]:
    """A candidate router head beside the serving one (``router.semantic.canary``): the
    share it routes, how often the two heads agree, and each head's accuracy on the
    turns reviewers labelled (counted by the catalog, so not filtered by namespace)."""
    dec = "mol_router_head_decisions_total"
    agree = "mol_router_head_agreement_total"
    labels = "mol_catalog_routing_labels_total"
    day = "[1d]"
    return [
        ts("Router heads: automatic turns/s by head and role", "reqps",
           Query(f"sum by (deployment, role, head) (rate({dec}{{{DEP}}}[{RATE}]))",
                 "{{deployment}} {{role}} {{head}}")),
        ts("Router heads: share of the candidate", "percentunit",
           Query(f'sum by (deployment) (rate({dec}{{{DEP},role="candidate"}}[{RATE}])) / '
                 f"sum by (deployment) (rate({dec}{{{DEP}}}[{RATE}]))", "{{deployment}}")),
        ts("Router heads: agreement of the candidate with the serving head", "percentunit",
           Query(f'sum by (deployment) (rate({agree}{{{DEP},result="agree"}}[{RATE}])) / '
                 f'sum by (deployment) (rate({agree}{{{DEP},result=~"agree|disagree"}}'
                 f"[{RATE}]))", "{{deployment}}")),
        ts("Router heads: accuracy on labelled turns (24h)", "percentunit",
           Query(f'sum by (head) (increase({labels}{{result="correct"}}{day})) / '
                 f"sum by (head) (increase({labels}{day}))", "{{head}}")),
        _panel(table.Panel, "Router heads: accuracy by head and right expert (24h)",
               "percentunit", [Query(
                   f'sum by (head, expert) (increase({labels}{{result="correct"}}{day})) / '
                   f"sum by (head, expert) (increase({labels}{day}))",
                   instant=True, table=True)], w=24),
    ]


def _fleet_table(title: str, expr: str) -> PanelBuilder:
    """One row per engine replica, its labels as columns: vLLM reports which adapters
    run as labels of ``vllm:lora_requests_info`` (the value is only a timestamp)."""
    columns = {"namespace": "Namespace", "deployment": "MoLDeployment",
               "instance": "Replica", "max_lora": "LoRA slots",
               "running_lora_adapters": "Running adapters",
               "waiting_lora_adapters": "Waiting adapters"}
    return (table.Panel().title(title).unit("none").datasource(DS).height(8).span(24)
            .with_target(_target(Query(expr, instant=True, table=True), "A"))
            .show_header(True)
            .with_transformation(DataTransformerConfig(id_val="organize", options={
                "excludeByName": {"Time": True, "Value": True, "__name__": True,
                                  "job": True, "model_name": True, "engine": True,
                                  "endpoint": True, "pod": True, "service": True,
                                  "container": True},
                "indexByName": {name: i for i, name in enumerate(columns)},
                "renameByName": columns})))


def lora_fleet() -> dashboard.Dashboard:
    d = _deployment_var(_base("mol-lora-fleet", "MoL LoRA fleet", ["vllm", "lora"],
                              "mol_router_requests_total"))
    req = "mol_router_requests_total"
    # The engines' own count (the MoL plugin's) where they export it, else the routers'
    # estimate (plain vLLM engines): docs/replica-picking.md, "Adapter loads".
    loads = (f"(sum by (deployment) (rate(mol_engine_adapter_loads_total{{tier=\"gpu\",{DEP}}}"
             f"[{RATE}])) or sum by (deployment) (rate(mol_router_adapter_loads_total{{{DEP}}}"
             f"[{RATE}])))")
    panels: list[PanelBuilder] = [
        _fleet_table("Adapters running per replica (newest vllm:lora_requests_info)",
                     f"topk by (namespace, deployment, instance) "
                     f"(1, vllm:lora_requests_info{{{DEP}}})"),
        ts("Adapter loads into GPU slots", "short", Query(loads, "{{deployment}}")),
        ts("Adapter loads per request", "percentunit",
           Query(f"{loads} / sum by (deployment) (rate({req}{{{DEP}}}[{RATE}]))",
                 "{{deployment}}")),
        ts("Requests waiting per replica", "short",
           Query(f"sum by (instance) (vllm:num_requests_waiting{{{DEP}}})", "{{instance}}")),
        ts("Requests running per replica", "short",
           Query(f"sum by (instance) (vllm:num_requests_running{{{DEP}}})", "{{instance}}")),
        ts("KV-cache usage per replica", "percentunit",
           Query(f"max by (instance) (vllm:kv_cache_usage_perc{{{DEP}}})", "{{instance}}")),
    ]
    return _with_panels(d, panels)


def adapters() -> dashboard.Dashboard:
    """The router's top K adapters by recent traffic (the rest are ``other``; a router
    labels at most ``MOL_ROUTER_TOP_ADAPTERS``), and its tenants."""
    req = "mol_router_requests_total"
    d = _deployment_var(_base("mol-adapters", "MoL adapters and tenants", ["router", "lora"],
                              req))
    top = f'{DEP},adapter!=""'
    cold = "mol_router_adapter_cold_requests_total"
    panels = [
        ts("Requests/s by adapter (top K; other: the rest)", "reqps",
           Query(f"sum by (adapter) (rate({req}{{{top}}}[{RATE}]))", "{{adapter}}")),
        ts("Share of requests outside the top K (other)", "percentunit",
           Query(f'sum by (deployment) (rate({req}{{{DEP},adapter="other"}}[{RATE}])) / '
                 f"sum by (deployment) (rate({req}{{{top}}}[{RATE}]))", "{{deployment}}")),
        ts("Error rate (5xx) by adapter", "percentunit",
           Query(f'sum by (adapter) (rate({req}{{{top},code=~"5.."}}[{RATE}])) / '
                 f"sum by (adapter) (rate({req}{{{top}}}[{RATE}]))", "{{adapter}}")),
        ts("Latency p50 / p95 by adapter", "s",
           *quantiles("mol_router_adapter_request_duration_seconds", "adapter", DEP)),
        ts("Time to first token p50 / p95 by adapter", "s",
           *quantiles("mol_router_adapter_time_to_first_token_seconds", "adapter", DEP)),
        ts("Tokens/s by adapter", "short",
           Query(f"sum by (adapter, kind) (rate(mol_router_adapter_tokens_total{{{DEP}}}"
                 f"[{RATE}]))", "{{adapter}} {{kind}}")),
        ts("Cold requests (sent to a replica without the adapter) by adapter", "percentunit",
           Query(f"sum by (adapter) (rate({cold}{{{DEP}}}[{RATE}])) / "
                 f"sum by (adapter) (rate({req}{{{top}}}[{RATE}]))", "{{adapter}}")),
        ts("Cold start p50 / p95 by adapter (send to first event)", "s",
           *quantiles("mol_router_adapter_cold_start_seconds", "adapter", DEP)),
        ts("Latency p95 by tenant", "s",
           *quantiles("mol_router_tenant_request_duration_seconds", "tenant", DEP, (0.95,))),
        ts("Time to first token p95 by tenant", "s",
           *quantiles("mol_router_tenant_time_to_first_token_seconds", "tenant", DEP,
                      (0.95,))),
        ts("Error rate (non-2xx) by tenant", "percentunit",
           Query(f'sum by (tenant) (rate(mol_router_tenant_requests_total{{{DEP},code!~"2.."}}'
                 f"[{RATE}])) / sum by (tenant) (rate(mol_router_tenant_requests_total"
                 f"{{{DEP}}}[{RATE}]))", "{{tenant}}")),
        # The catalog serves every deployment (and may run in another namespace): its
        # gauge is not filtered by the dashboard's variables.
        ts("Adapters unused for 30 days (catalog; never used included)", "short",
           Query('max by (window) (mol_catalog_unused_adapters{window="30d"})',
                 "unused {{window}}")),
    ]
    return _with_panels(d, panels)


def catalog() -> dashboard.Dashboard:
    req = "mol_catalog_requests_total"
    d = _base("mol-catalog", "MoL adapter catalog", ["catalog"], req)
    dur = "mol_catalog_request_duration_seconds"
    panels = [
        ts("Publishes/s by result", "reqps",
           Query(f"sum by (result) (rate(mol_catalog_publishes_total{{{NS}}}[{RATE}]))",
                 "{{result}}")),
        ts("Resolve latency p50 / p99", "s",
           *quantiles(dur, "route", f'{NS},route=~"/v1/resolve.*"', (0.5, 0.99))),
        ts("Compatibility rejections by reason", "short",
           Query(f"sum by (reason) (rate(mol_catalog_compat_rejections_total{{{NS}}}"
                 f"[{RATE}]))", "{{reason}}")),
        ts("Requests/s by route and code", "reqps",
           Query(f"sum by (route, code) (rate({req}{{{NS}}}[{RATE}]))", "{{route}} {{code}}")),
        ts("5xx ratio", "percentunit",
           Query(f'(sum(rate({req}{{{NS},code=~"5.."}}[{RATE}])) or vector(0)) / '
                 f"sum(rate({req}{{{NS}}}[{RATE}]))", "5xx")),
    ]
    return _with_panels(d, panels)


def operator() -> dashboard.Dashboard:
    rec = "mol_operator_reconcile_total"
    d = _base("mol-operator", "MoL operator", ["operator"], rec)
    panels = [
        ts("Reconciles/s by result", "reqps",
           Query(f"sum by (result) (rate({rec}{{{NS}}}[{RATE}]))", "{{result}}")),
        ts("Reconciles not done (invalid spec, retried)/s", "reqps",
           Query(f'sum by (result) (rate({rec}{{{NS},result!="ok"}}[{RATE}]))', "{{result}}")),
        ts("Reconcile duration p50 / p99", "s",
           *quantiles("mol_operator_reconcile_duration_seconds", "job", NS, (0.5, 0.99))),
        ts("Canary transitions by result", "short",
           Query(f"sum by (result) (increase(mol_operator_canary_transitions_total{{{NS}}}"
                 f"[{RATE}]))", "{{result}}")),
    ]
    return _with_panels(d, panels)


DASHBOARDS: dict[str, Callable[[], dashboard.Dashboard]] = {
    "mol-overview": overview, "mol-canary": canary, "mol-lora-fleet": lora_fleet,
    "mol-adapters": adapters, "mol-catalog": catalog, "mol-operator": operator,
}


def render() -> dict[str, str]:
    """File name -> JSON text, deterministic (sorted keys, fixed indent)."""
    out = {}
    for name, build in DASHBOARDS.items():
        data = json.loads(JSONEncoder(sort_keys=True).encode(build().build()))
        out[f"{name}.json"] = json.dumps(data, indent=2, sort_keys=True) + "\n"
    return out


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
