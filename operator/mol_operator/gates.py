"""Promotion gates: does the canary version's offline evaluation hold up against the
stable version's? A pure function of the gates and both versions' eval reports.

A gate names an eval suite, a metric and the least improvement (``minDelta``) of the
canary over the stable version. Each version's report of the suite comes from the
catalog (``mol catalog eval attach``); when the gate names no suite version, the two
are compared at the newest suite version both have (by the canary report's time).
A report that is not there, or lacks the metric, is ``GateMissing``; a delta below
``minDelta`` is ``GateFailed``. The canary controller promotes only when every gate
holds, and otherwise holds the canary at its last step with the first problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mol_platform.contract.catalog_models import EvalReport
from mol_platform.contract.spec import PromotionGate

MISSING: Final = "GateMissing"
FAILED: Final = "GateFailed"
TOLERANCE: Final = 1e-9  # float noise a delta at exactly minDelta may carry


@dataclass(frozen=True)
class GateResult:
    """One gate's outcome: ``reason`` "" when it holds, else GateMissing or GateFailed."""

    gate: str  # suite/metric, as people name it
    reason: str
    message: str

    @property
    def holds(self) -> bool:
        return not self.reason


def gate_name(gate: PromotionGate) -> str:
    version = f"@{gate.suite_version}" if gate.suite_version else ""
    return f"{gate.suite}{version}/{gate.metric}"


def _of_suite(reports: Sequence[EvalReport], gate: PromotionGate) -> list[EvalReport]:
    return [r for r in reports if r.suite == gate.suite
            and (gate.suite_version is None or r.suite_version == gate.suite_version)]


def check_gate(gate: PromotionGate, stable: Sequence[EvalReport], canary: Sequence[EvalReport],
               stable_version: int, canary_version: int) -> GateResult:
    """One gate against the stable (``stable``) and canary (``canary``) version's reports."""
    name = gate_name(gate)
    suite = gate.suite + (f" {gate.suite_version}" if gate.suite_version else "")

    def missing(message: str) -> GateResult:
        return GateResult(name, MISSING, f"gate {name}: {message}")

    mine, theirs = _of_suite(canary, gate), _of_suite(stable, gate)
    if not mine:
        return missing(f"canary v{canary_version} has no {suite} eval report")
    if not theirs:
        return missing(f"stable v{stable_version} has no {suite} eval report")
    common = {r.suite_version for r in mine} & {r.suite_version for r in theirs}
    if not common:
        return missing(
            f"no {gate.suite} suite version in common: canary v{canary_version} has "
            f"{', '.join(sorted({r.suite_version for r in mine}))}, stable v{stable_version} "
            f"has {', '.join(sorted({r.suite_version for r in theirs}))}")
    c = max((r for r in mine if r.suite_version in common),
            key=lambda r: (r.created_at or "", r.suite_version))
    s = next(r for r in theirs if r.suite_version == c.suite_version)
    at = f"{gate.suite} {c.suite_version}"
    for who, version, report in (("canary", canary_version, c), ("stable", stable_version, s)):
        if gate.metric not in report.metrics:
            return missing(f"the {at} report of {who} v{version} has no metric {gate.metric} "
                           f"(it has {', '.join(sorted(report.metrics)) or 'none'})")
    cv, sv = c.metrics[gate.metric], s.metrics[gate.metric]
    delta = cv - sv if gate.higher_is_better else sv - cv
    shown = (f"canary v{canary_version} {cv:g} - stable v{stable_version} {sv:g}"
             if gate.higher_is_better else
             f"stable v{stable_version} {sv:g} - canary v{canary_version} {cv:g}")
    if delta + TOLERANCE < gate.min_delta:
        return GateResult(name, FAILED, f"gate {name}: {shown} = {delta:+.4g} < minDelta "
                                        f"{gate.min_delta:g} ({at})")
    return GateResult(name, "", f"gate {name}: {shown} = {delta:+.4g} >= minDelta "
                                f"{gate.min_delta:g}")


def check_gates(gates: Sequence[PromotionGate], stable: Sequence[EvalReport],
                canary: Sequence[EvalReport], stable_version: int,
                canary_version: int) -> list[GateResult]:
    return [check_gate(g, stable, canary, stable_version, canary_version) for g in gates]


def first_problem(results: Sequence[GateResult]) -> GateResult | None:
    """What holds the canary: the first failing gate, else the first missing one, else
    None (every gate holds)."""
    for reason in (FAILED, MISSING):
        for r in results:
            if r.reason == reason:
                return r
    return None
