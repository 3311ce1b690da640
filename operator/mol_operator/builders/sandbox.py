"""The code harness in a cluster: the sandbox service, and the pods sessions run in.

When an expert sets ``harness: true`` the deployment gets a sandbox service (``mol
sandbox serve``: Deployment, Service, a ServiceAccount allowed to start session pods)
and one pod per session, every one from the same pod spec:

- where kubernetes-sigs/agent-sandbox's CRDs are served (``Facts.agent_sandbox``), the
  spec is a SandboxTemplate with a SandboxWarmPool beside it, and the service makes one
  SandboxClaim per session at run time;
- elsewhere it is a ``v1`` Pod manifest in a ConfigMap (key ``pod.json``), which the
  service creates once per session (``generateName``) and keeps ``warmPool`` of ahead.

Session pods are built to hold hostile code: Pod Security ``restricted`` (non-root,
RuntimeDefault seccomp, no escalation, no capabilities, read-only root), no service
account token and no service links, a memory-backed scratch ``emptyDir`` with a size
limit, CPU, memory and ephemeral-storage limits, an optional ``runtimeClassName``
(gVisor, Kata). A NetworkPolicy of ours denies all their egress but the allowlist, with
the metadata and cluster ranges excepted, and admits only the sandbox service: agent-
sandbox's own managed policy (which allows the internet) is turned off.
Session pods carry no ``mol.dev/component`` label: the catalog admits none of them.

The service listens beyond loopback, so it needs a tokens file (bearer token -> tenant).
With ``router.apiKeys`` it is the router's own keys Secret, mounted: the router hands
each caller's key on, so a tenant's key is its sandbox identity. Without keys it is a
Secret holding one token for the router (``Names.sandbox_token``: the executor makes the
token once, randomly, and keeps it), which the router reads as ``MOL_ROUTER_SANDBOX_TOKEN``
and the service knows by its sha256 only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kubernetes.client import (
    RbacV1Subject,
    V1Container,
    V1ContainerPort,
    V1Deployment,
    V1DeploymentSpec,
    V1EmptyDirVolumeSource,
    V1EnvVar,
    V1EnvVarSource,
    V1IPBlock,
    V1KeyToPath,
    V1LabelSelector,
    V1NetworkPolicy,
    V1NetworkPolicyEgressRule,
    V1NetworkPolicyIngressRule,
    V1NetworkPolicyPeer,
    V1NetworkPolicyPort,
    V1NetworkPolicySpec,
    V1ObjectMeta,
    V1PodSpec,
    V1PodTemplateSpec,
    V1PolicyRule,
    V1Probe,
    V1ResourceRequirements,
    V1Role,
    V1RoleBinding,
    V1RoleRef,
    V1Secret,
    V1SecretKeySelector,
    V1SecretVolumeSource,
    V1Service,
    V1ServiceAccount,
    V1ServicePort,
    V1ServiceSpec,
    V1TCPSocketAction,
    V1Volume,
    V1VolumeMount,
)

from mol_operator.builders.common import (
    TOKEN_KEY,
    Facts,
    b64,
    container_security,
    labels,
    meta,
    pod_labels,
    pod_security,
    selector,
    serialize,
)
from mol_platform.contract.router_config import API_KEYS_SECRET_KEY
from mol_platform.contract.sandbox_limits import SessionLimitSettings
from mol_platform.contract.spec_sandbox import HarnessSpec, denied_within, egress_network

SANDBOX_API = "extensions.agents.x-k8s.io/v1beta1"
SANDBOX_PORT = 8080
SESSION_PORT = 8888
SESSION_COMPONENT = "sandbox-session"
POD_TEMPLATE_KEY = "pod.json"
# Where a session writes: the scratch tmpfs is its HOME and its /tmp.
SCRATCH = "/tmp"
# The tokens file's folder in the service's pod (the Secret's keys.yaml alone).
TOKENS_DIR = "/etc/mol/sandbox-tokens"
# The tenant the router's own token is, when the deployment has no API keys.
ROUTER_TENANT = "router"


def harness_of(facts: Facts) -> HarnessSpec:
    """``spec.harness``, else the operator's default section (the chart's ``harness``
    values); a deployment's own section takes the default's image and runtime class when
    it names none (the API server fills in every other field from the CRD's defaults, so
    nothing else can tell "left out" from "set")."""
    default = facts.defaults.harness or HarnessSpec()
    own = facts.obj.spec.harness
    if own is None:
        return default
    return own.model_copy(update={
        "image": own.image or default.image,
        "runtime_class_name": own.runtime_class_name or default.runtime_class_name})


def wants_sandbox(facts: Facts) -> bool:
    """Whether the harness is on: some expert sets ``harness: true``."""
    return bool(facts.obj.spec.harness_experts)


def uses_router_token(facts: Facts) -> bool:
    """Whether the router calls the sandbox with a token of its own (the harness is on and
    there are no API keys to hand on)."""
    return wants_sandbox(facts) and facts.obj.spec.router.api_keys is None


def tokens_secret(facts: Facts) -> str:
    """The Secret whose ``keys.yaml`` is the service's tokens file."""
    keys = facts.obj.spec.router.api_keys
    return keys.secret_ref if keys is not None else facts.names.sandbox_token


def sandbox_token_secret(facts: Facts) -> dict[str, Any]:
    """The router's token (``token``) and a tokens file that knows it by its digest only
    (``keys.yaml``), so the service's pod never holds the token itself."""
    digest = hashlib.sha256(facts.sandbox_token.encode()).hexdigest()
    keys = {"keys": [{"tenant": ROUTER_TENANT, "keySha256": digest}]}
    obj = V1Secret(
        api_version="v1", kind="Secret", type="Opaque",
        metadata=meta(facts, facts.names.sandbox_token, "sandbox"),
        data={TOKEN_KEY: b64(facts.sandbox_token),
              API_KEYS_SECRET_KEY: b64(json.dumps(keys, sort_keys=True))},
    )
    out: dict[str, Any] = serialize(obj)
    return out


def router_sandbox_env(facts: Facts) -> list[V1EnvVar]:
    """``MOL_ROUTER_SANDBOX_TOKEN`` from the router's token Secret, when it has one."""
    if not uses_router_token(facts):
        return []
    return [V1EnvVar(name="MOL_ROUTER_SANDBOX_TOKEN", value_from=V1EnvVarSource(
        secret_key_ref=V1SecretKeySelector(name=facts.names.sandbox_token, key=TOKEN_KEY)))]


def sandbox_image(facts: Facts) -> str:
    return harness_of(facts).image or facts.defaults.router_image


def limits_env(facts: Facts, **overrides: int) -> list[V1EnvVar]:
    """The session limits and the session cap, named and in the units the sandbox service
    reads them (``SessionLimitSettings``, which its settings inherit)."""
    limits = SessionLimitSettings.from_harness(harness_of(facts))
    if overrides:
        limits = SessionLimitSettings.model_validate({**limits.model_dump(), **overrides})
    return [V1EnvVar(name=k, value=v) for k, v in limits.env().items()]


def session_labels(facts: Facts) -> dict[str, str]:
    """A session pod's labels (no ``mol.dev/component``: see the module's docstring)."""
    return labels(facts, SESSION_COMPONENT)


def session_pod_spec(facts: Facts) -> V1PodSpec:
    """The one pod spec every session runs in (both backends)."""
    h = harness_of(facts)
    lim = h.limits
    resources = {"cpu": lim.cpu, "memory": lim.memory, "ephemeral-storage": "64Mi"}
    probe = V1Probe(tcp_socket=V1TCPSocketAction(port=SESSION_PORT), period_seconds=2)
    container = V1Container(
        name="session",
        image=sandbox_image(facts),
        image_pull_policy="IfNotPresent",
        command=["mol"],
        # The pod is the sandbox: it holds exactly one session.
        args=["sandbox", "serve", "--host", "0.0.0.0", "--port", str(SESSION_PORT)],
        ports=[V1ContainerPort(name="session", container_port=SESSION_PORT)],
        env=[*limits_env(facts, max_sessions=1), V1EnvVar(name="HOME", value=SCRATCH)],
        resources=V1ResourceRequirements(requests=resources, limits=resources),
        security_context=container_security(),
        readiness_probe=probe,
        liveness_probe=V1Probe(tcp_socket=V1TCPSocketAction(port=SESSION_PORT),
                               period_seconds=10, failure_threshold=3),
        volume_mounts=[V1VolumeMount(name="scratch", mount_path=SCRATCH)],
    )
    return V1PodSpec(
        containers=[container],
        security_context=pod_security(),
        runtime_class_name=h.runtime_class_name,
        automount_service_account_token=False,
        enable_service_links=False,
        restart_policy="Never",  # a crashed session is a fresh session, said so
        termination_grace_period_seconds=5,
        volumes=[V1Volume(name="scratch", empty_dir=V1EmptyDirVolumeSource(
            medium="Memory", size_limit=str(lim.disk_bytes)))],
    )


def session_pod(facts: Facts) -> dict[str, Any]:
    """The plain-pod backend's manifest: the service creates it per session."""
    name = facts.names.sandbox_session
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": f"{name}-", "namespace": facts.namespace,
                     "labels": session_labels(facts)},
        "spec": serialize(session_pod_spec(facts)),
    }
    return pod


def session_template(facts: Facts) -> list[dict[str, Any]]:
    """The session pods' spec as the backend reads it: a SandboxTemplate and its
    SandboxWarmPool (agent-sandbox), else a ConfigMap holding the Pod manifest."""
    name = facts.names.sandbox_session
    metadata = serialize(meta(facts, name, SESSION_COMPONENT))
    if not facts.agent_sandbox:
        text = json.dumps(session_pod(facts), indent=1, sort_keys=True)
        return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                 "data": {POD_TEMPLATE_KEY: text}}]
    template = {
        "apiVersion": SANDBOX_API, "kind": "SandboxTemplate", "metadata": metadata,
        "spec": {
            "podTemplate": {"metadata": {"labels": session_labels(facts)},
                            "spec": serialize(session_pod_spec(facts))},
            # Ours (session_network_policy) denies egress; agent-sandbox's allows the
            # internet, so it is not made.
            "networkPolicyManagement": "Unmanaged",
            "envVarsInjectionPolicy": "Disallowed",
        },
    }
    pool = {
        "apiVersion": SANDBOX_API, "kind": "SandboxWarmPool", "metadata": metadata,
        "spec": {"replicas": harness_of(facts).warm_pool,
                 "sandboxTemplateRef": {"name": name}},
    }
    return [template, pool]


def session_network_policy(facts: Facts) -> dict[str, Any]:
    """Session pods: ingress from the sandbox service only; egress nowhere but the
    allowlist, each entry with the denied networks inside it excepted."""
    egress: list[V1NetworkPolicyEgressRule] = []
    allow = harness_of(facts).egress.allow
    if allow:
        peers = []
        for entry in allow:
            network = egress_network(entry)
            excepted = [str(d) for d in denied_within(network)]
            block: dict[str, Any] = {"cidr": str(network)}
            if excepted:
                block["except"] = excepted  # by its API name (a keyword in Python)
            peers.append(V1NetworkPolicyPeer(ip_block=V1IPBlock.model_validate(block)))
        egress.append(V1NetworkPolicyEgressRule(to=peers))
    service = V1NetworkPolicyPeer(pod_selector=V1LabelSelector(
        match_labels=selector(facts, "sandbox")))
    obj = V1NetworkPolicy(
        api_version="networking.k8s.io/v1", kind="NetworkPolicy",
        metadata=meta(facts, facts.names.sandbox_session, SESSION_COMPONENT),
        spec=V1NetworkPolicySpec(
            pod_selector=V1LabelSelector(match_labels=selector(facts, SESSION_COMPONENT)),
            policy_types=["Ingress", "Egress"],
            ingress=[V1NetworkPolicyIngressRule.model_validate({"from": [service], "ports": [
                V1NetworkPolicyPort(port=SESSION_PORT, protocol="TCP")]})],
            egress=egress,
        ),
    )
    out: dict[str, Any] = serialize(obj)
    # An empty egress list is the deny-all; the client drops empty lists on output.
    out["spec"].setdefault("egress", [])
    return out


def _session_rules(facts: Facts) -> list[V1PolicyRule]:
    """What the service may do: make and end sessions (claims or pods), read the
    template it makes them from."""
    if facts.agent_sandbox:
        return [
            V1PolicyRule(api_groups=["extensions.agents.x-k8s.io"],
                         resources=["sandboxclaims"],
                         verbs=["get", "list", "watch", "create", "delete"]),
            V1PolicyRule(api_groups=["agents.x-k8s.io"], resources=["sandboxes"],
                         verbs=["get", "list", "watch"]),
        ]
    return [
        V1PolicyRule(api_groups=[""], resources=["pods"],
                     verbs=["get", "list", "watch", "create", "delete"]),
        V1PolicyRule(api_groups=[""], resources=["configmaps"],
                     resource_names=[facts.names.sandbox_session], verbs=["get"]),
    ]


def service_env(facts: Facts) -> list[V1EnvVar]:
    """The service's settings: the session limits and ``maxSessions``. Only names the
    service reads are rendered (the warm pool and the template are objects of their own,
    above)."""
    return [*limits_env(facts), V1EnvVar(name="HOME", value=SCRATCH)]


def sandbox_objects(facts: Facts) -> list[dict[str, Any]]:
    """The sandbox service (RBAC, Deployment, Service), the session template (and warm
    pool) and the sessions' NetworkPolicy."""
    name = facts.names.sandbox
    h = harness_of(facts)
    rbac: list[Any] = [
        V1ServiceAccount(api_version="v1", kind="ServiceAccount",
                         metadata=meta(facts, name, "sandbox")),
        V1Role(api_version="rbac.authorization.k8s.io/v1", kind="Role",
               metadata=meta(facts, name, "sandbox"), rules=_session_rules(facts)),
        V1RoleBinding(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding",
                      metadata=meta(facts, name, "sandbox"),
                      role_ref=V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                         name=name),
                      subjects=[RbacV1Subject(kind="ServiceAccount", name=name,
                                              namespace=facts.namespace)]),
    ]
    container = V1Container(
        name="sandbox",
        image=sandbox_image(facts),
        image_pull_policy="IfNotPresent",
        command=["mol"],
        args=["sandbox", "serve", "--host", "0.0.0.0", "--port", str(SANDBOX_PORT),
              "--tokens-file", f"{TOKENS_DIR}/{API_KEYS_SECRET_KEY}"],
        ports=[V1ContainerPort(name="http", container_port=SANDBOX_PORT)],
        env=service_env(facts),
        resources=V1ResourceRequirements(requests={"cpu": "100m", "memory": "128Mi"},
                                         limits={"cpu": "1", "memory": "256Mi"}),
        security_context=container_security(),
        readiness_probe=V1Probe(tcp_socket=V1TCPSocketAction(port="http"), period_seconds=5),
        liveness_probe=V1Probe(tcp_socket=V1TCPSocketAction(port="http"), period_seconds=10,
                               failure_threshold=6),
        volume_mounts=[V1VolumeMount(name="tmp", mount_path=SCRATCH),
                       V1VolumeMount(name="tokens", mount_path=TOKENS_DIR, read_only=True)],
    )
    tokens = V1Volume(name="tokens", secret=V1SecretVolumeSource(
        secret_name=tokens_secret(facts),
        items=[V1KeyToPath(key=API_KEYS_SECRET_KEY, path=API_KEYS_SECRET_KEY)]))
    deployment = V1Deployment(
        api_version="apps/v1", kind="Deployment",
        metadata=meta(facts, name, "sandbox"),
        spec=V1DeploymentSpec(
            replicas=h.replicas,
            selector=V1LabelSelector(match_labels=selector(facts, "sandbox")),
            template=V1PodTemplateSpec(
                metadata=V1ObjectMeta(labels=pod_labels(facts, "sandbox")),
                spec=V1PodSpec(service_account_name=name, containers=[container],
                               security_context=pod_security(),
                               volumes=[V1Volume(name="tmp", empty_dir=V1EmptyDirVolumeSource(
                                   size_limit="64Mi")), tokens])),
        ),
    )
    service = V1Service(
        api_version="v1", kind="Service",
        metadata=meta(facts, name, "sandbox"),
        spec=V1ServiceSpec(selector=selector(facts, "sandbox"), ports=[
            V1ServicePort(name="http", port=80, target_port="http", protocol="TCP")]),
    )
    out = [*([sandbox_token_secret(facts)] if uses_router_token(facts) else []),
           *(serialize(o) for o in rbac), serialize(deployment), serialize(service),
           *session_template(facts), session_network_policy(facts)]
    if facts.defaults.network_policy:
        out.append(service_network_policy(facts))
    return out


def service_network_policy(facts: Facts) -> dict[str, Any]:
    """The sandbox service admits its deployment's routers only (with the chart's
    networkPolicy.enabled, as the engines' policy)."""
    router = V1NetworkPolicyPeer(pod_selector=V1LabelSelector(
        match_labels=selector(facts, "router")))
    obj = V1NetworkPolicy(
        api_version="networking.k8s.io/v1", kind="NetworkPolicy",
        metadata=meta(facts, facts.names.sandbox, "sandbox"),
        spec=V1NetworkPolicySpec(
            pod_selector=V1LabelSelector(match_labels=selector(facts, "sandbox")),
            policy_types=["Ingress"],
            ingress=[V1NetworkPolicyIngressRule.model_validate({"from": [router], "ports": [
                V1NetworkPolicyPort(port="http", protocol="TCP")]})],
        ),
    )
    out: dict[str, Any] = serialize(obj)
    return out
