"""Which expert (or named adapter) a request goes to, as docs/design.md orders it.

1. ``"router": "<expert>"`` in the body wins;
2. ``model`` naming an expert, or an adapter ``ns/name@ref`` in one of the
   deployment's ``adapterNamespaces``;
3. ``model`` = ``auto`` or the deployment's name (or no ``model``): the routing
   mode decides (the semantic signal, :mod:`mol_router.auto.scores`, and/or the classifier
   expert, :mod:`mol_router.serving.classify`), else the default.

Then the canary split: a stable hash of the user (body ``user`` or ``x-mol-user``)
sends a fixed share of users to the expert's canary version, so one user keeps
seeing one version while the weight stays put.
"""

from __future__ import annotations

import difflib
import hashlib
import random
from dataclasses import dataclass
from typing import Any

from mol_platform.contract.refs import AdapterRef, RefError
from mol_platform.contract.router_config import RouterConfig, RouterExpert
from mol_platform.contract.spec_router import SEMANTIC_MODES
from mol_router.errors import RouterError
from mol_router.routing import handoff

ADAPTER_LABEL = "adapter"  # the expert label of requests that name an adapter directly
AUTO = "auto"


@dataclass(frozen=True, slots=True)
class Choice:
    """Where a request goes before resolution: the expert label, the reference to
    resolve, how it was chosen (``mode``; for ``model: auto`` the routing mode), the
    signal that decided, whether it is the canary version, and for automatic choices
    the ``x-mol-route`` header's value."""

    expert: str
    ref: str
    mode: str
    canary: bool = False
    signal: str = "request"
    route: str | None = None


@dataclass(frozen=True, slots=True)
class Routing:
    """An immutable view of one RouterConfig, swapped whole on reload."""

    config: RouterConfig
    experts: dict[str, RouterExpert]
    auto_names: frozenset[str]
    namespaces: frozenset[str]
    classifier_choices: tuple[str, ...]
    models_list: str  # for 404 messages
    # expert -> (its handoff tool, the experts it may name); absent: nothing to offer
    handoff_tools: dict[str, tuple[dict[str, Any], frozenset[str]]]

    @classmethod
    def build(cls, config: RouterConfig) -> Routing:
        experts = {e.name: e for e in config.experts}
        choices = tuple(n for n in experts
                        if n != config.classifier or n == config.default or len(experts) == 1)
        listed = ", ".join([*experts, AUTO, config.deployment])
        if config.adapter_namespaces:
            listed += " or adapters " + ", ".join(f"{ns}/<name>@<ref>"
                                                  for ns in config.adapter_namespaces)
        tools = {}
        for name in experts:
            targets = tuple(n for n in choices if n != name)
            if targets:
                descriptions = {n: experts[n].description for n in targets}
                tools[name] = (handoff.tool(targets, descriptions), frozenset(targets))
        return cls(config, experts, frozenset({AUTO, config.deployment}),
                   frozenset(config.adapter_namespaces), choices, listed, tools)

    def refs(self) -> list[str]:
        """Every reference the config names (to resolve ahead of traffic)."""
        out: list[str] = []
        for e in self.experts.values():
            out.append(e.adapter)
            if e.canary is not None:
                out.append(e.canary.adapter)
        return out

    def expert_choice(self, name: str, mode: str, user: str | None, signal: str = "request",
                      route: str | None = None) -> Choice:
        expert = self.experts[name]
        canary = expert.canary
        if canary is not None and canary.weight > 0 and in_canary(name, user, canary.weight):
            return Choice(name, canary.adapter, mode, True, signal, route)
        return Choice(name, expert.adapter, mode, False, signal, route)

    def unknown(self, what: str, value: str, param: str) -> RouterError:
        """404 naming what is served, the closest name first when one is near."""
        known = [*self.experts, AUTO, self.config.deployment]
        close = difflib.get_close_matches(value, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        if value == self.config.base_model:
            hint = ("that is the base model: this router serves its experts (adapters on "
                    "it), not the bare base; ")
        return RouterError(404, f"{what} {value!r} is not served here; {hint}available: "
                           f"{self.models_list}", "model_not_found", param=param)

    def select(self, router_field: object, model: object, user: str | None) -> Choice | None:
        """The choice, or None when the routing mode has to decide (semantic signal,
        classifier)."""
        if router_field is not None:
            if not isinstance(router_field, str):
                raise RouterError(400, "'router' must be a string naming an expert",
                                  "invalid_type", param="router")
            if router_field not in self.experts:
                raise self.unknown("expert", router_field, "router")
            return self.expert_choice(router_field, "router", user)
        if model is None or model in self.auto_names:
            cfg = self.config
            if cfg.mode in SEMANTIC_MODES or (cfg.mode == "classifier"
                                              and cfg.classifier is not None):
                return None
            return self.expert_choice(cfg.default, "default", user, "default")
        if not isinstance(model, str):
            raise RouterError(400, "'model' must be a string", "invalid_type", param="model")
        if model in self.experts:
            return self.expert_choice(model, "model", user)
        if "/" in model:
            try:
                ref = AdapterRef.parse(model)
            except RefError as exc:
                raise RouterError(400, str(exc), "invalid_model", param="model") from None
            if ref.namespace not in self.namespaces:
                raise self.unknown("adapter namespace", ref.namespace, "model")
            return Choice(ADAPTER_LABEL, model, "adapter")
        raise self.unknown("model", model, "model")


def in_canary(expert: str, user: str | None, weight: float) -> bool:
    """Sticky per user: the same user and expert always land on the same side."""
    if user is None:
        return random.random() * 100.0 < weight
    digest = hashlib.blake2b(f"{expert}\0{user}".encode("utf-8", "surrogatepass"),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big") % 10_000 < weight * 100.0
