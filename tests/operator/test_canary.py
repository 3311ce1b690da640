"""The canary decision as a table: spec + status + measurement + time -> next status."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mol_operator.canary import (
    CanaryMeasurement,
    CanaryStatus,
    canary_step,
    format_time,
    status_from_dict,
    status_to_dict,
    transition_result,
)
from mol_operator.metrics import OperatorMetrics
from mol_platform.contract.spec import CanarySpec

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SPEC = CanarySpec.model_validate({
    "adapter": "acme/coding@candidate",
    "steps": [10, 25, 50, 100],
    "interval": "5m",
    "analysis": {"maxErrorRate": 0.02, "maxLatencyRatio": 1.25},
})
HEALTHY = CanaryMeasurement(error_rate=0.01, latency_ratio=1.1, requests=200)
AT_LIMITS = CanaryMeasurement(error_rate=0.02, latency_ratio=1.25, requests=200)
NO_TRAFFIC = CanaryMeasurement(error_rate=None, latency_ratio=None, requests=0)
ERRORS = CanaryMeasurement(error_rate=0.1, latency_ratio=1.0, requests=50)
SLOW = CanaryMeasurement(error_rate=0.0, latency_ratio=2.5, requests=80)
NO_STABLE = CanaryMeasurement(error_rate=0.0, latency_ratio=None, requests=30)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def running(step: int, *, since: float = 0.0, phase: str = "Progressing") -> CanaryStatus:
    return CanaryStatus(4, float(SPEC.steps[step]), phase, step, format_time(at(since)), "")


CASES = [
    # (id, current, version, measurement, now, phase, weight, step, event says)
    ("first look starts at the first step", None, 4, None, 0, "Progressing", 10, 0, "started"),
    ("a new version starts over", running(2), 5, HEALTHY, 10, "Progressing", 10, 0, "started"),
    ("not due: holds", running(1), 4, HEALTHY, 299, "Progressing", 25, 1, None),
    ("due and healthy: next step", running(1), 4, HEALTHY, 300, "Progressing", 50, 2, "50%"),
    ("at the limits is healthy", running(0), 4, AT_LIMITS, 301, "Progressing", 25, 1, "25%"),
    ("no stable traffic: errors decide", running(0), 4, NO_STABLE, 300, "Progressing", 25, 1,
     "25%"),
    ("reaching 100 promotes", running(2), 4, HEALTHY, 300, "Promoted", 100, 3, "promoted"),
    ("errors roll back before the step is due", running(2), 4, ERRORS, 10, "RolledBack", 0, 2,
     "error rate 0.1000 > maxErrorRate 0.02"),
    ("latency rolls back", running(1), 4, SLOW, 300, "RolledBack", 0, 1,
     "latency ratio 2.500 > maxLatencyRatio 1.25"),
    ("due without traffic: paused, never promoted", running(2), 4, NO_TRAFFIC, 400, "Paused",
     50, 2, "no canary requests"),
    ("due without a measurement: paused", running(2), 4, None, 400, "Paused", 50, 2,
     "no measurement"),
    ("still no traffic: no second event", running(2, phase="Paused"), 4, NO_TRAFFIC, 500,
     "Paused", 50, 2, None),
    ("traffic again after a pause: next step", running(1, phase="Paused"), 4, HEALTHY, 500,
     "Progressing", 50, 2, "50%"),
    ("promoted stays promoted", replace(running(3), phase="Promoted"), 4, ERRORS, 900,
     "Promoted", 100, 3, None),
    ("rolled back stays rolled back", replace(running(1), phase="RolledBack", weight=0.0), 4,
     HEALTHY, 900, "RolledBack", 0, 1, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("current", "version", "measurement", "now", "phase", "weight", "step", "event"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_canary_step(
    current: CanaryStatus | None, version: int, measurement: CanaryMeasurement | None,
    now: float, phase: str, weight: float, step: int, event: str | None,
) -> None:  # fmt: skip
    status, message = canary_step(SPEC, current, version, measurement, at(now))
    assert (status.phase, status.weight, status.step, status.version) == (
        phase, weight, step, version,
    )  # fmt: skip
    if event is None:
        assert message is None
    else:
        assert message is not None
        assert event in message
        assert "acme/coding@candidate" in message
        assert f"(v{version})" in message
    if status != current and phase != "Paused":
        assert status.last_step_at == format_time(at(now))  # the step clock restarts


def test_rollback_message_carries_the_numbers() -> None:
    status, event = canary_step(SPEC, running(1), 4, ERRORS, at(10))
    assert status.message == (
        "rolled back at 25%: error rate 0.1000 > maxErrorRate 0.02 over 50 canary requests"
    )
    assert event is not None
    assert status.message in event


def test_paused_canary_recovers_before_the_step_is_due() -> None:
    paused = running(1, since=0, phase="Paused")
    status, event = canary_step(SPEC, paused, 4, HEALTHY, at(100))
    assert (status.phase, status.weight, event) == ("Progressing", 25.0, None)


def test_steps_ending_below_100_promote_after_the_last_step() -> None:
    spec = SPEC.model_copy(update={"steps": [20, 50]})
    status, _ = canary_step(spec, None, 4, None, T0)
    status, _ = canary_step(spec, status, 4, HEALTHY, at(300))
    assert (status.phase, status.weight) == ("Progressing", 50.0)
    status, event = canary_step(spec, status, 4, HEALTHY, at(600))
    assert (status.phase, status.weight) == ("Promoted", 100.0)
    assert event is not None
    assert "promoted" in event


def test_a_rollout_survives_restarts_through_status() -> None:
    """Every step goes through the status JSON, as after an operator restart."""
    status: CanaryStatus | None = None
    seen = []
    for minute in range(0, 30):
        now = at(minute * 60)
        new, _ = canary_step(SPEC, status, 4, HEALTHY, now)
        status = status_from_dict(json.loads(json.dumps(status_to_dict(new))))
        assert status == new
        seen.append((status.weight, status.phase))
        if status.phase == "Promoted":
            break
    weights = list(dict.fromkeys(w for w, _ in seen))
    assert weights == [10.0, 25.0, 50.0, 100.0]
    assert seen[-1] == (100.0, "Promoted")
    assert len(seen) == 16  # three 5-minute steps, looked at every minute


@pytest.mark.parametrize(
    "data",
    [
        None,
        "Progressing",
        {},
        {"weight": 10, "step": 0},
        {"version": 4, "weight": "x", "phase": "Progressing"},
        {"version": 4, "weight": 101, "phase": "Progressing"},
        {"version": 4, "weight": 10, "phase": "Walking"},
        {"version": "4", "weight": 10, "phase": "Progressing"},
        {"version": 0, "weight": 10, "phase": "Progressing"},
        {"version": 4, "weight": 10, "phase": "Progressing", "step": -1},
        {"version": 4, "weight": 10, "phase": "Progressing", "lastStepAt": "yesterday"},
    ],
)
def test_unreadable_status_starts_over(data: object) -> None:
    assert status_from_dict(data) is None  # type: ignore[arg-type]


def test_status_dict_is_camel_case_json() -> None:
    status = running(2, since=12.5)
    data = status_to_dict(status)
    assert data == {
        "version": 4, "weight": 50.0, "phase": "Progressing", "step": 2,
        "lastStepAt": "2026-01-02T03:04:17.500Z", "message": "",
    }  # fmt: skip
    assert status_from_dict(json.loads(json.dumps(data))) == status


@pytest.mark.parametrize(
    ("before", "after", "result"),
    [
        (None, running(0), "started"),
        (running(1), replace(running(0), version=5), "started"),
        (running(0), running(1), "advanced"),
        (running(1), replace(running(1), phase="Paused"), "paused"),
        (running(2), replace(running(3), phase="Promoted"), "promoted"),
        (running(2), replace(running(2), phase="RolledBack", weight=0.0), "rolled_back"),
        (running(2), running(2), None),
        (running(1, phase="Paused"), running(1), None),
    ],
)
def test_transition_result(
    before: CanaryStatus | None, after: CanaryStatus, result: str | None
) -> None:
    assert transition_result(before, after) == result


def test_metrics_record_weight_and_transitions() -> None:
    metrics = OperatorMetrics()
    metrics.canary("demo", "coding", 25.0, "advanced")
    metrics.canary("demo", "coding", 0.0, "rolled_back")
    sample = metrics.registry.get_sample_value
    assert sample("mol_canary_weight", {"deployment": "demo", "expert": "coding"}) == 0.0
    which = {"deployment": "demo", "expert": "coding"}
    assert sample("mol_operator_canary_transitions_total", {**which, "result": "advanced"}) == 1.0
    assert sample("mol_operator_canary_transitions_total",
                  {**which, "result": "rolled_back"}) == 1.0
    metrics.forget_canary("demo", "coding")
    metrics.forget_canary("demo", "coding")  # twice is fine
    assert sample("mol_canary_weight", {"deployment": "demo", "expert": "coding"}) is None
