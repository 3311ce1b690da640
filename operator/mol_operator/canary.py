"""Canary controller: step an expert's canary weight while the router's metrics stay healthy.

The decision is a pure function (:func:`canary_step`) of the spec, the state kept in
the MoLDeployment's status, one measurement and the time, so a restarted operator
carries on from status where it stopped, and every rule is tested as a table. The
measurement (:func:`mol_operator.canary_measure.measure_canary`, the module's I/O half)
reads the router's own metrics from Prometheus with :func:`canary_queries`: the canary
version's 5xx share of requests and its mean latency against the stable version's, over
one step interval.

Rules, in order: a new canary version (the spec's ref now resolves elsewhere) starts
over at the first step; a finished rollout (``Promoted``/``RolledBack``) stays as it
is; a measurement over the limits rolls back at once (weight 0), whether or not a step
is due; when a step is due, a measurement with canary traffic advances to the next
step, and without traffic (or without a measurement) the weight holds (``Paused``):
no data never promotes. After the last step the canary is ``Promoted`` (weight 100),
unless a promotion gate (``mol_operator.gates``) does not hold: then the weight holds at
the last step (``Paused``, ``gate`` saying GateMissing or GateFailed) and the gates are
checked again on every look until they hold or the spec changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from mol_operator.gates import FAILED, MISSING, GateResult
from mol_platform.contract.spec import CanarySpec

PHASES: Final = ("Progressing", "Paused", "Promoted", "RolledBack")
TERMINAL: Final = frozenset({"Promoted", "RolledBack"})


@dataclass(frozen=True)
class CanaryStatus:
    """One expert's canary state, as kept in ``status.experts[].canary``."""

    version: int | None
    weight: float
    phase: str
    step: int
    last_step_at: str | None
    message: str = ""
    gate: str = ""  # GateMissing | GateFailed while a promotion gate holds the canary


@dataclass(frozen=True)
class CanaryMeasurement:
    """The canary version's health over one window of router metrics.

    ``error_rate`` is None without canary requests; ``latency_ratio`` (canary mean
    latency / stable mean latency) is None when either side has no requests."""

    error_rate: float | None
    latency_ratio: float | None
    requests: float


# -- time -----------------------------------------------------------------------------


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with milliseconds (``2026-01-02T03:04:05.678Z``)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# -- status round trip --------------------------------------------------------------------


def status_to_dict(status: CanaryStatus) -> dict[str, Any]:
    """The JSON written under ``status.experts[].canary`` (camelCase, like the CRD);
    ``gate`` only while a promotion gate holds the canary."""
    out: dict[str, Any] = {
        "version": status.version,
        "weight": status.weight,
        "phase": status.phase,
        "step": status.step,
        "lastStepAt": status.last_step_at,
        "message": status.message,
    }
    if status.gate:
        out["gate"] = status.gate
    return out


def status_from_dict(data: Mapping[str, Any] | None) -> CanaryStatus | None:
    """Read back :func:`status_to_dict`'s output; None when absent or not understood
    (the rollout then starts over, which is safe: it begins at the smallest weight)."""
    if not isinstance(data, Mapping):
        return None
    try:
        version = data.get("version")
        weight = float(data["weight"])
        phase = str(data["phase"])
        step = int(data.get("step", 0))
        last = data.get("lastStepAt")
        if last is not None:
            parse_time(str(last))
    except (KeyError, TypeError, ValueError):
        return None
    gate = str(data.get("gate") or "")
    if (
        gate not in ("", MISSING, FAILED)
        or phase not in PHASES
        or not 0.0 <= weight <= 100.0
        or step < 0
        or (version is not None and (not isinstance(version, int) or version < 1))
    ):
        return None
    return CanaryStatus(
        version=version,
        weight=weight,
        phase=phase,
        step=step,
        last_step_at=None if last is None else str(last),
        message=str(data.get("message") or ""),
        gate=gate,
    )


# -- the decision -------------------------------------------------------------------------


def _unhealthy(spec: CanarySpec, m: CanaryMeasurement) -> str | None:
    """Why the measurement fails the analysis, with the numbers; None when it passes."""
    limits = spec.analysis
    problems = []
    if m.error_rate is not None and m.error_rate > limits.max_error_rate:
        problems.append(f"error rate {m.error_rate:.4f} > maxErrorRate {limits.max_error_rate:g}")
    if m.latency_ratio is not None and m.latency_ratio > limits.max_latency_ratio:
        problems.append(
            f"latency ratio {m.latency_ratio:.3f} > maxLatencyRatio {limits.max_latency_ratio:g}"
        )
    if not problems:
        return None
    return f"{'; '.join(problems)} over {m.requests:g} canary requests"


def _due(spec: CanarySpec, current: CanaryStatus, now: datetime) -> bool:
    if current.last_step_at is None:
        return True
    elapsed = (now - parse_time(current.last_step_at)).total_seconds()
    return elapsed >= spec.interval_seconds


def next_promotes(canary_spec: CanarySpec, current: CanaryStatus | None) -> bool:
    """Whether the next healthy step of ``current`` is the promotion (the gates matter)."""
    if current is None or current.phase in TERMINAL:
        return False
    nxt = current.step + 1
    return nxt >= len(canary_spec.steps) or canary_spec.steps[nxt] >= 100


def canary_step(
    canary_spec: CanarySpec,
    current: CanaryStatus | None,
    canary_version: int,
    measurement: CanaryMeasurement | None,
    now: datetime,
    missing: str = "no measurement from Prometheus",
    gate: GateResult | None = None,
) -> tuple[CanaryStatus, str | None]:
    """The next canary state and, when something was decided, an Event message
    (``missing``: why there is no measurement, shown while the rollout holds; ``gate``:
    the promotion gate that does not hold, None when every gate holds or there are
    none)."""
    name = f"{canary_spec.adapter} (v{canary_version})"
    steps = canary_spec.steps
    stamp = format_time(now)
    if current is None or current.version != canary_version:
        first = CanaryStatus(canary_version, float(steps[0]), "Progressing", 0, stamp,
                             f"step 1/{len(steps)}: {steps[0]}% of traffic")  # fmt: skip
        return first, f"canary {name} started: {steps[0]}% of traffic"
    if current.phase in TERMINAL:
        return current, None
    if measurement is not None and measurement.requests > 0:
        why = _unhealthy(canary_spec, measurement)
        if why is not None:
            message = f"rolled back at {current.weight:g}%: {why}"
            return CanaryStatus(canary_version, 0.0, "RolledBack", current.step, stamp,
                                message), f"canary {name} {message}"  # fmt: skip
    if not _due(canary_spec, current, now):
        if (current.phase == "Paused" and not current.gate and measurement is not None
                and measurement.requests > 0):
            return replace(current, phase="Progressing", message=_at_step(current, steps)), None
        return current, None
    if measurement is None or measurement.requests <= 0:
        reason = (
            missing if measurement is None
            else "no canary requests in the analysis window"
        )  # fmt: skip
        held = replace(current, phase="Paused", gate="",
                       message=f"holding at {current.weight:g}%: {reason}")
        event = None if current.phase == "Paused" else f"canary {name} {held.message}"
        return held, event
    nxt = current.step + 1
    if (nxt >= len(steps) or steps[nxt] >= 100) and gate is not None and not gate.holds:
        held = replace(current, phase="Paused", gate=gate.reason,
                       message=f"holding at {current.weight:g}%: {gate.message}")
        changed = current.phase != "Paused" or current.message != held.message
        return held, f"canary {name} {held.message}" if changed else None
    if nxt >= len(steps) or steps[nxt] >= 100:
        done = CanaryStatus(canary_version, 100.0, "Promoted", min(nxt, len(steps) - 1),
                            stamp, f"promoted after {nxt} healthy step(s)")  # fmt: skip
        return done, f"canary {name} promoted: 100% of traffic"
    advanced = CanaryStatus(canary_version, float(steps[nxt]), "Progressing", nxt, stamp, "")
    advanced = replace(advanced, message=_at_step(advanced, steps))
    return advanced, f"canary {name} advanced to {steps[nxt]}% of traffic"


def _at_step(status: CanaryStatus, steps: list[int]) -> str:
    return f"step {status.step + 1}/{len(steps)}: {status.weight:g}% of traffic"


def transition_result(before: CanaryStatus | None, after: CanaryStatus) -> str | None:
    """The ``result`` label of ``mol_operator_canary_transitions_total`` for a step."""
    if before == after:
        return None
    if before is None or before.version != after.version:
        return "started"
    if after.phase != before.phase and after.phase in ("Promoted", "RolledBack", "Paused"):
        return {"Promoted": "promoted", "RolledBack": "rolled_back", "Paused": "paused"}[
            after.phase
        ]
    if after.step != before.step:
        return "advanced"
    return None


# -- measurement (the queries; mol_operator.canary_measure runs them) --------------------


def label(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def version_of(labels: Mapping[str, str]) -> int | None:
    text = labels.get("version", "").removeprefix("v")
    return int(text) if text.isdigit() else None


def canary_queries(
    *, deployment: str, expert: str, stable_version: int, canary_version: int, window: str
) -> tuple[str, str]:
    """PromQL for (canary requests by code, mean latency by version) over ``window``.

    The router labels versions either ``3`` or ``v3``; both match."""
    sel = f"deployment={label(deployment)},expert={label(expert)}"
    canary = f'{sel},version=~"v?{canary_version}"'
    both = f'{sel},version=~"v?({canary_version}|{stable_version})"'
    requests = f"sum by (code) (increase(mol_router_requests_total{{{canary}}}[{window}]))"
    latency = (
        f"sum by (version) (rate(mol_router_request_duration_seconds_sum{{{both}}}[{window}]))"
        f" / sum by (version) (rate(mol_router_request_duration_seconds_count{{{both}}}"
        f"[{window}]))"
    )
    return requests, latency
