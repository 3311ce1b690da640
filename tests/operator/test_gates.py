"""Promotion gates as tables: the gate decision (gates + both versions' eval reports ->
holds, GateMissing or GateFailed) and its effect on the canary step (a canary whose
next step promotes holds at its weight while a gate does not hold)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from mol_operator.canary import (
    CanaryMeasurement,
    CanaryStatus,
    canary_step,
    format_time,
    next_promotes,
    status_from_dict,
    status_to_dict,
)
from mol_operator.gates import FAILED, MISSING, GateResult, check_gate, check_gates, first_problem
from mol_operator.status import canary_condition
from mol_platform.contract.catalog_models import EvalReport
from mol_platform.contract.spec import CanarySpec, PromotionGate

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def report(suite: str, metrics: dict[str, float], suite_version: str = "1",
           at: str = "2026-01-01T00:00:00Z") -> EvalReport:
    return EvalReport(adapter="acme/coding", version=1, suite=suite, suite_version=suite_version,
                      metrics=metrics, dataset_digest=None, judge_model=None,
                      report_digest=None, report_size=None, created_by=None, created_at=at)


def gate(**kw: Any) -> PromotionGate:
    return PromotionGate.model_validate({"suite": "humaneval", "metric": "pass@1", **kw})


STABLE = [report("humaneval", {"pass@1": 0.60}), report("loss", {"nll": 1.2})]
GATE_CASES = [
    # (id, gate, stable reports, canary reports, reason, message has)
    ("better passes", gate(), STABLE, [report("humaneval", {"pass@1": 0.65})], "",
     "canary v2 0.65 - stable v1 0.6 = +0.05 >= minDelta 0"),
    ("equal passes at minDelta 0", gate(), STABLE, [report("humaneval", {"pass@1": 0.60})], "",
     ">= minDelta 0"),
    ("worse fails", gate(), STABLE, [report("humaneval", {"pass@1": 0.55})], FAILED,
     "canary v2 0.55 - stable v1 0.6 = -0.05 < minDelta 0 (humaneval 1)"),
    ("below a positive minDelta fails", gate(minDelta=0.1), STABLE,
     [report("humaneval", {"pass@1": 0.65})], FAILED, "< minDelta 0.1"),
    ("a negative minDelta allows that regression", gate(minDelta=-0.1), STABLE,
     [report("humaneval", {"pass@1": 0.55})], "", ">= minDelta -0.1"),
    ("lower is better: less passes", gate(suite="loss", metric="nll", higherIsBetter=False),
     STABLE, [report("loss", {"nll": 1.0})], "", "stable v1 1.2 - canary v2 1 = +0.2"),
    ("lower is better: more fails", gate(suite="loss", metric="nll", higherIsBetter=False),
     STABLE, [report("loss", {"nll": 1.5})], FAILED, "= -0.3 < minDelta 0"),
    ("canary has no report", gate(), STABLE, [report("mmlu", {"acc": 1})], MISSING,
     "gate humaneval/pass@1: canary v2 has no humaneval eval report"),
    ("stable has no report", gate(), [], [report("humaneval", {"pass@1": 1})], MISSING,
     "stable v1 has no humaneval eval report"),
    ("metric missing", gate(metric="pass@10"), STABLE, [report("humaneval", {"pass@1": 1})],
     MISSING, "the humaneval 1 report of canary v2 has no metric pass@10 (it has pass@1)"),
    ("no suite version in common", gate(), STABLE,
     [report("humaneval", {"pass@1": 1}, "2")], MISSING,
     "no humaneval suite version in common: canary v2 has 2, stable v1 has 1"),
    ("a pinned suite version is compared", gate(suiteVersion="2"),
     [*STABLE, report("humaneval", {"pass@1": 0.9}, "2")],
     [report("humaneval", {"pass@1": 0.99}, "1"), report("humaneval", {"pass@1": 0.8}, "2")],
     FAILED, "gate humaneval@2/pass@1: canary v2 0.8 - stable v1 0.9"),
    ("a pinned suite version the canary lacks", gate(suiteVersion="3"), STABLE,
     [report("humaneval", {"pass@1": 1})], MISSING, "canary v2 has no humaneval 3 eval report"),
    ("the newest common suite version decides",  gate(),
     [report("humaneval", {"pass@1": 0.5}, "a"), report("humaneval", {"pass@1": 0.9}, "b")],
     [report("humaneval", {"pass@1": 0.6}, "a", at="2026-01-01T00:00:00Z"),
      report("humaneval", {"pass@1": 0.8}, "b", at="2026-01-02T00:00:00Z")], FAILED,
     "(humaneval b)"),
]  # fmt: skip


@pytest.mark.parametrize(("g", "stable", "canary", "reason", "says"),
                         [pytest.param(*c[1:], id=c[0]) for c in GATE_CASES])
def test_check_gate(g: PromotionGate, stable: list[EvalReport], canary: list[EvalReport],
                    reason: str, says: str) -> None:
    result = check_gate(g, stable, canary, stable_version=1, canary_version=2)
    assert result.reason == reason
    assert result.holds is (reason == "")
    assert says in result.message


def test_first_problem_prefers_a_failing_gate() -> None:
    results = check_gates([gate(metric="absent"), gate(), gate(suite="loss", metric="nll")],
                          STABLE, [report("humaneval", {"pass@1": 0.1}),
                                   report("loss", {"nll": 1.2})], 1, 2)
    assert [r.reason for r in results] == [MISSING, FAILED, ""]
    problem = first_problem(results)
    assert problem is not None
    assert problem.reason == FAILED
    assert first_problem([results[2]]) is None


def test_gate_fields_are_validated() -> None:
    for bad in ({"suite": "Human Eval"}, {"metric": "1x"}, {"suiteVersion": "-x"},
                {"minDelta": 1e7}, {"extra": 1}):
        with pytest.raises(ValidationError):
            gate(**bad)
    with pytest.raises(ValidationError):
        CanarySpec.model_validate({"adapter": "a/b@c", "gates": [
            {"suite": "s", "metric": f"m{i}"} for i in range(17)]})


SPEC = CanarySpec.model_validate({"adapter": "acme/coding@candidate", "steps": [50, 100],
                                  "interval": "1m", "gates": [{"suite": "humaneval",
                                                               "metric": "pass@1"}]})
HEALTHY = CanaryMeasurement(error_rate=0.0, latency_ratio=1.0, requests=100)
ERRORS = CanaryMeasurement(error_rate=0.5, latency_ratio=1.0, requests=100)
MISSING_GATE = GateResult("humaneval/pass@1", MISSING,
                          "gate humaneval/pass@1: canary v4 has no humaneval eval report")
FAILED_GATE = GateResult("humaneval/pass@1", FAILED, "gate humaneval/pass@1: ... < minDelta 0")
HOLDS = GateResult("humaneval/pass@1", "", "gate humaneval/pass@1: ok")


def at_step(step: int, phase: str = "Progressing", gate_reason: str = "",
            message: str = "") -> CanaryStatus:
    return CanaryStatus(4, float(SPEC.steps[step]), phase, step, format_time(T0), message,
                        gate_reason)


STEP_CASES = [
    # (id, current, measurement, seconds later, gate, phase, weight, gate field, event has)
    ("a missing report holds the last step", at_step(0), HEALTHY, 60, MISSING_GATE, "Paused",
     50, MISSING, "holding at 50%: gate humaneval/pass@1: canary v4 has no humaneval"),
    ("a failing gate holds the last step", at_step(0), HEALTHY, 60, FAILED_GATE, "Paused", 50,
     FAILED, "minDelta"),
    ("every gate holding promotes", at_step(0), HEALTHY, 60, HOLDS, "Promoted", 100, "",
     "promoted"),
    ("no gate problem promotes", at_step(0), HEALTHY, 60, None, "Promoted", 100, "",
     "promoted"),
    ("the gate attached later promotes", at_step(0, "Paused", MISSING), HEALTHY, 120, None,
     "Promoted", 100, "", "promoted"),
    ("still missing: no second event",
     at_step(0, "Paused", MISSING, f"holding at 50%: {MISSING_GATE.message}"), HEALTHY, 120,
     MISSING_GATE, "Paused", 50, MISSING, None),
    ("missing turned failing: an event", at_step(0, "Paused", MISSING, "x"), HEALTHY, 120,
     FAILED_GATE, "Paused", 50, FAILED, "minDelta"),
    ("held by a gate, traffic before the step is due: still held",
     at_step(0, "Paused", MISSING, "x"), HEALTHY, 10, MISSING_GATE, "Paused", 50, MISSING, None),
    ("unhealthy live metrics still roll back", at_step(0, "Paused", FAILED), ERRORS, 120,
     FAILED_GATE, "RolledBack", 0, "", "rolled back"),
]  # fmt: skip


@pytest.mark.parametrize(("current", "measurement", "later", "g", "phase", "weight", "held",
                          "event"), [pytest.param(*c[1:], id=c[0]) for c in STEP_CASES])
def test_gates_in_the_canary_step(current: CanaryStatus, measurement: CanaryMeasurement,
                                  later: int, g: GateResult | None, phase: str, weight: float,
                                  held: str, event: str | None) -> None:
    after, message = canary_step(SPEC, current, 4, measurement, T0 + timedelta(seconds=later),
                                 gate=g)
    assert (after.phase, after.weight) == (phase, weight)
    assert after.gate == (held if phase == "Paused" else after.gate)
    if phase == "Paused":
        assert after.gate == held
    if event is None:
        assert message is None
    else:
        assert message is not None
        assert event in message
    assert status_from_dict(status_to_dict(after)) == after


def test_gates_matter_only_before_the_promoting_step() -> None:
    four = CanarySpec.model_validate({"adapter": "a/b@c", "steps": [10, 50, 100]})
    assert not next_promotes(four, None)
    assert not next_promotes(four, CanaryStatus(1, 10.0, "Progressing", 0, None))
    assert next_promotes(four, CanaryStatus(1, 50.0, "Progressing", 1, None))
    assert not next_promotes(four, CanaryStatus(1, 100.0, "Promoted", 2, None))
    # a gate problem is ignored at a step that does not promote
    after, _ = canary_step(four, CanaryStatus(4, 10.0, "Progressing", 0, format_time(T0)), 4,
                           HEALTHY, T0 + timedelta(minutes=5), gate=FAILED_GATE)
    assert (after.phase, after.weight) == ("Progressing", 50.0)


def test_condition_names_the_gate() -> None:
    def expert(gate_reason: str, message: str) -> dict[str, Any]:
        return {"name": "coding", "canary": {"phase": "Paused", "gate": gate_reason,
                                             "message": message}}
    failed = canary_condition([expert(FAILED, "holding at 50%: gate g/m: worse")], [],
                              ["coding"], True)
    assert (failed["status"], failed["reason"]) == ("False", "GateFailed")
    assert failed["message"] == "coding: holding at 50%: gate g/m: worse"
    missing = canary_condition([expert(MISSING, "holding: gate g/m: no report")], [],
                               ["coding"], True)
    assert (missing["status"], missing["reason"]) == ("Unknown", "GateMissing")
    plain = canary_condition([expert("", "no measurement")], [], ["coding"], True)
    assert plain["reason"] == "NoMeasurement"


def test_status_with_an_unknown_gate_reason_starts_over() -> None:
    data = status_to_dict(at_step(0, "Paused", MISSING))
    assert status_from_dict({**data, "gate": "Whatever"}) is None
