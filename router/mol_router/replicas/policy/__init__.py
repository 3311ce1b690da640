"""Replica picking: pure policies ``(endpoints, stats, request) -> endpoint``.

The router's tracker keeps the state (scraped engine metrics, in-flight counts, what
was sent where) and hands policies immutable snapshots, so a policy's choice depends
only on its inputs. ``make_policy(name, knobs)`` builds one from the router config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mol_router.replicas.policy.gie import GieLoraAffinity
from mol_router.replicas.policy.interface import EngineStats, Policy, RouteRequest
from mol_router.replicas.policy.llmd import LlmdLoraLoadState, LlmdPrecisePrefix
from mol_router.replicas.policy.mol import MolAffinity
from mol_router.replicas.policy.simple import LeastLoaded, RoundRobin

DEFAULT_POLICY = "mol-affinity"


def _no_knobs(factory: Callable[[], Policy], name: str) -> Callable[[Mapping[str, Any]], Policy]:
    def build(knobs: Mapping[str, Any]) -> Policy:
        if knobs:
            raise ValueError(f"policy {name!r} takes no knobs, got {', '.join(sorted(knobs))}")
        return factory()

    return build


_FACTORIES: dict[str, Callable[[Mapping[str, Any]], Policy]] = {
    MolAffinity.name: MolAffinity,
    RoundRobin.name: _no_knobs(RoundRobin, RoundRobin.name),
    LeastLoaded.name: _no_knobs(LeastLoaded, LeastLoaded.name),
    GieLoraAffinity.name: GieLoraAffinity,
    LlmdLoraLoadState.name: LlmdLoraLoadState,
    LlmdPrecisePrefix.name: LlmdPrecisePrefix,
}

POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)
"""Every policy name ``make_policy`` accepts, the default first."""


def make_policy(name: str, knobs: Mapping[str, Any] | None = None) -> Policy:
    """A fresh policy instance; ``ValueError`` naming the valid choices on a bad name
    or knob (the router refuses such a config and keeps the last good one)."""
    factory = _FACTORIES.get(name)
    if factory is None:
        choices = ", ".join(POLICY_NAMES)
        raise ValueError(f"unknown routing policy {name!r}; choose one of {choices}")
    return factory(knobs or {})


__all__ = [
    "DEFAULT_POLICY",
    "POLICY_NAMES",
    "EngineStats",
    "Policy",
    "RouteRequest",
    "make_policy",
]
