"""Pure builders: a MoLDeployment plus the facts the reconcile decided -> manifests.

Built-in objects are made with the ``kubernetes`` package's typed models and KServe's
with the ``kserve`` package's, then serialized to the API's JSON. Nothing here talks
to a cluster or a catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mol_operator.builders.common import Defaults, Facts, Names
from mol_operator.builders.embedding import (
    embedding_deployment,
    embedding_service,
    wants_embedding_engine,
)
from mol_operator.builders.engine import (
    BuildError,
    engine_deployment,
    engine_pdb,
    engine_service,
    scaled_object,
)
from mol_operator.builders.extras import (
    KSERVE_API_VERSION,
    catalog_secret,
    llm_inference_service,
    network_policy,
    service_monitor,
)
from mol_operator.builders.router import endpoint, router_config, router_objects
from mol_operator.builders.sandbox import (
    SANDBOX_API,
    sandbox_objects,
    sandbox_token_secret,
    uses_router_token,
    wants_sandbox,
)

__all__ = ["BuildError", "Defaults", "Facts", "ManagedKind", "Names", "build_all",
           "catalog_secret", "endpoint", "managed_objects", "router_config",
           "sandbox_token_secret", "uses_router_token"]


@dataclass(frozen=True)
class ManagedKind:
    """A kind of child the operator may own, where it lives and how it is named."""

    api_version: str
    kind: str
    plural: str
    name: str  # attribute of Names


# Every child a MoLDeployment can have, in apply order (Secrets and config before the
# workloads that mount them).
MANAGED: tuple[ManagedKind, ...] = (
    ManagedKind("v1", "Secret", "secrets", "catalog_secret"),
    ManagedKind("v1", "Secret", "secrets", "sandbox_token"),
    ManagedKind("v1", "ServiceAccount", "serviceaccounts", "router"),
    ManagedKind("rbac.authorization.k8s.io/v1", "Role", "roles", "router"),
    ManagedKind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", "router"),
    ManagedKind("v1", "ServiceAccount", "serviceaccounts", "sandbox"),
    ManagedKind("rbac.authorization.k8s.io/v1", "Role", "roles", "sandbox"),
    ManagedKind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", "sandbox"),
    ManagedKind("v1", "ConfigMap", "configmaps", "router"),
    ManagedKind("v1", "ConfigMap", "configmaps", "sandbox_session"),
    ManagedKind("v1", "Service", "services", "engine"),
    ManagedKind("v1", "Service", "services", "embedding"),
    ManagedKind("v1", "Service", "services", "router"),
    ManagedKind("apps/v1", "Deployment", "deployments", "engine"),
    ManagedKind("apps/v1", "Deployment", "deployments", "embedding"),
    ManagedKind("apps/v1", "Deployment", "deployments", "router"),
    ManagedKind("v1", "Service", "services", "sandbox"),
    ManagedKind("apps/v1", "Deployment", "deployments", "sandbox"),
    ManagedKind(SANDBOX_API, "SandboxTemplate", "sandboxtemplates", "sandbox_session"),
    ManagedKind(SANDBOX_API, "SandboxWarmPool", "sandboxwarmpools", "sandbox_session"),
    ManagedKind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", "engine"),
    ManagedKind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", "engine"),
    ManagedKind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", "embedding"),
    ManagedKind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", "sandbox"),
    ManagedKind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies",
                "sandbox_session"),
    ManagedKind("keda.sh/v1alpha1", "ScaledObject", "scaledobjects", "engine"),
    ManagedKind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors", "engine"),
    ManagedKind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors", "router"),
    ManagedKind(KSERVE_API_VERSION, "LLMInferenceService", "llminferenceservices", "kserve"),
)


def managed_objects(names: Names) -> list[tuple[ManagedKind, str]]:
    """(kind, object name) of every child slot, in apply order."""
    return [(m, str(getattr(names, m.name))) for m in MANAGED]


def build_all(facts: Facts) -> list[dict[str, Any]]:
    """Every desired child, in apply order; raises BuildError for an unrenderable spec."""
    spec = facts.obj.spec
    out: list[dict[str, Any]] = [catalog_secret(facts)]
    router = router_objects(facts)
    if spec.serving.mode == "raw":
        engine = [engine_service(facts), engine_deployment(facts), engine_pdb(facts)]
        if facts.defaults.network_policy:
            engine.append(network_policy(facts, "engine"))
        scaler = scaled_object(facts)
        monitors = [service_monitor(facts, "engine"), service_monitor(facts, "router")]
        workload = [*engine, *([scaler] if scaler else [])]
    else:
        workload = [llm_inference_service(facts)]
        monitors = [service_monitor(facts, "router")]
    # The semantic signal's embedding engine: a CPU Deployment in both serving modes.
    if wants_embedding_engine(facts):
        workload += [embedding_service(facts), embedding_deployment(facts)]
        if facts.defaults.network_policy:
            workload.append(network_policy(facts, "embedding"))
    # The code harness: the sandbox service and its sessions' pod template and policy.
    if wants_sandbox(facts):
        workload += sandbox_objects(facts)
    out += [*router, *workload, *monitors]
    order = {(m.api_version, m.kind, str(getattr(facts.names, m.name))): i
             for i, m in enumerate(MANAGED)}
    return sorted(out, key=lambda o: order[(o["apiVersion"], o["kind"], o["metadata"]["name"])])
