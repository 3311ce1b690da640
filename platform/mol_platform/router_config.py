"""``RouterConfig``: the file the router reads (and hot-reloads).

The operator renders it into the router's ConfigMap; ``mol up`` writes it locally.
It is derived from a ``MoLDeployment`` by :func:`router_config_from_spec` so both
paths produce the same file.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from mol_platform.spec import AdapterRefStr, MoLDeployment


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class RouterCanary(_Model):
    adapter: AdapterRefStr
    weight: float = Field(default=0.0, ge=0.0, le=100.0)  # percent of the expert's traffic


class RouterExpert(_Model):
    name: str
    adapter: AdapterRefStr
    description: str = ""
    canary: RouterCanary | None = None


class EndpointSliceSelector(_Model):
    namespace: str
    service_name: str
    port_name: str = "http"


class RouterConfig(_Model):
    deployment: str
    namespace: str = "default"
    profile: str
    catalog_url: str | None = None
    experts: list[RouterExpert] = Field(min_length=1)
    mode: Literal["auto", "explicit"] = "explicit"
    classifier: str | None = None
    default: str
    handoff_enabled: bool = False
    handoff_max_hops: int = Field(default=2, ge=1)
    adapter_namespaces: list[str] = Field(default_factory=list)
    endpoints: list[str] = Field(default_factory=list)  # static engine base URLs
    endpoint_slice: EndpointSliceSelector | None = None
    base_model: str = ""  # the engine's served model name

    @model_validator(mode="after")
    def _check(self) -> RouterConfig:
        names = {e.name for e in self.experts}
        if self.default not in names:
            raise ValueError(f"default {self.default!r} is not an expert")
        if self.classifier is not None and self.classifier not in names:
            raise ValueError(f"classifier {self.classifier!r} is not an expert")
        if not self.endpoints and self.endpoint_slice is None:
            raise ValueError("set endpoints or endpointSlice: the router needs engines")
        return self

    def expert(self, name: str) -> RouterExpert | None:
        for e in self.experts:
            if e.name == name:
                return e
        return None


def profile_name(deployment: str, namespace: str = "default") -> str:
    """The serving profile a deployment declares in the catalog."""
    return f"{namespace}.{deployment}"


def router_config_from_spec(
    obj: MoLDeployment,
    *,
    endpoints: list[str] | None = None,
    endpoint_slice: EndpointSliceSelector | None = None,
    catalog_url: str | None = None,
    canary_weights: dict[str, float] | None = None,
) -> RouterConfig:
    spec = obj.spec
    ns = obj.metadata.namespace or "default"
    weights = canary_weights or {}
    experts = [
        RouterExpert(
            name=e.name,
            adapter=e.adapter,
            description=e.description,
            canary=(
                RouterCanary(adapter=e.canary.adapter, weight=weights.get(e.name, 0.0))
                if e.canary is not None
                else None
            ),
        )
        for e in spec.experts
    ]
    return RouterConfig(
        deployment=obj.metadata.name,
        namespace=ns,
        profile=profile_name(obj.metadata.name, ns),
        catalog_url=catalog_url,
        experts=experts,
        mode=spec.router.mode,
        classifier=spec.router.classifier.expert if spec.router.classifier else None,
        default=spec.default_expert,
        handoff_enabled=spec.router.handoff.enabled,
        handoff_max_hops=spec.router.handoff.max_hops,
        adapter_namespaces=list(spec.adapter_namespaces),
        endpoints=list(endpoints or []),
        endpoint_slice=endpoint_slice,
        base_model=spec.base_model.name,
    )
