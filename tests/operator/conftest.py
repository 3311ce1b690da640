"""Operator fixtures: a real catalog (uvicorn on SQLite, auth on) seeded with a base model
and demo adapters, the operator settings pointing at it, and the emulator's write log.

- ``catalog``: session-scoped :class:`LiveCatalog` (``url``, ``admin_token``, ``stop()``,
  ``start()`` on the same port and database, ``client()`` an admin sync client).
- ``operator_settings``: ``OperatorSettings`` for an in-process kopf run against ``kube``.
- ``run_operator()``: starts kopf with the operator's handlers (``lead=``: under a
  leader campaign, ``wait=False``: as a replica that may stand by); ``writes(kube, since)``
  lists (verb, plural, name) of the write requests the emulator received.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import pytest

from mol_platform.clients.catalog import CatalogClient
from mol_testkit.kube import KubeServer
from mol_testkit.kube_client import ResourceSpec
from mol_testkit.kube_kopf import KopfRunner, quiet_kopf_logs
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port, stop_process, wait_port

ADMIN_TOKEN = "mol_" + "o" * 43
# Running canaries are looked at every second in tests (read when the handlers import).
os.environ.setdefault("MOL_OPERATOR_CANARY_TICK_SECONDS", "1")
ADAPTERS = ("chat", "agent", "coding", "ui", "router")
# Built-in kinds the operator writes that the emulator does not register by default.
RBAC = (ResourceSpec("rbac.authorization.k8s.io", "v1", "roles", "Role", subresources=()),
        ResourceSpec("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding",
                     subresources=()))
LLMISVC = ResourceSpec("serving.kserve.io", "v1alpha2", "llminferenceservices",
                       "LLMInferenceService")


@dataclass
class LiveCatalog:
    data: Path
    port: int = field(default_factory=free_port)
    admin_token: str = ADMIN_TOKEN
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "MOL_CATALOG_AUTH": "on", "MOL_CATALOG_ADMIN_TOKEN": ADMIN_TOKEN}
        db = f"sqlite:///{self.data / 'catalog.db'}"
        code = (f"from mol_catalog.server import serve; serve('127.0.0.1', {self.port}, "
                f"{db!r}, {('file://' + str(self.data / 'blobs'))!r})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=env)
        wait_port(self.port, timeout=60)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def client(self) -> CatalogClient:
        return CatalogClient(self.url, ADMIN_TOKEN)


def seed(catalog: LiveCatalog) -> None:
    """The synthetic base plus demo/<name> v1 (@stable) for each adapter, coding v2
    (@candidate) and demo/wide (rank 32: does not fit a profile with maxLoraRank 16)."""
    model = SyntheticLlama()
    with catalog.client() as c:
        c.request("POST", "/v1/base-models", json=model.base_body())

        def publish(name: str, seed_: int, alias: str, rank: int = 8) -> None:
            cfg, weights = model.lora_files(rank, seed=seed_)
            c.request("POST", f"/v1/adapters/demo/{name}/versions",
                      data={"base": f"{model.name}@{model.revision}", "alias": alias},
                      files={"adapter_config.json": ("adapter_config.json", cfg),
                             "adapter_model.safetensors": ("adapter_model.safetensors",
                                                           weights)})

        for i, name in enumerate(ADAPTERS):
            publish(name, i, "stable")
        publish("coding", 99, "candidate")
        publish("wide", 7, "stable", rank=32)


@contextlib.contextmanager
def seeded_catalog(data: Path) -> Iterator[LiveCatalog]:
    """A running, seeded catalog in ``data``, stopped on exit."""
    live = LiveCatalog(data)
    live.start()
    try:
        seed(live)
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="session")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCatalog]:
    with seeded_catalog(tmp_path_factory.mktemp("catalog")) as live:
        yield live


def settings_for(kube: KubeServer, catalog: LiveCatalog, **overrides: Any) -> Any:
    from mol_operator.settings import OperatorSettings

    values: dict[str, Any] = {
        "kube_url": kube.url, "catalog_url": catalog.url, "catalog_token": ADMIN_TOKEN,
        "metrics_port": 0, "retry_seconds": 1.0, "prometheus_url": "http://127.0.0.1:9",
    }
    values.update(overrides)
    return OperatorSettings(**values)


@pytest.fixture
def operator_kube(kube: KubeServer) -> KubeServer:
    """``kube`` serving every kind the operator writes (RBAC is not there by default)."""
    for spec in RBAC:
        kube.register(spec)
    return kube


@pytest.fixture
def run_operator(operator_kube: KubeServer, catalog: LiveCatalog,
                 kopf_runner: Callable[..., KopfRunner]) -> Callable[..., KopfRunner]:
    """Start the operator (its handlers on kopf's default registry) against ``kube``."""
    import mol_operator.handlers  # noqa: F401  (registers the handlers)

    kube = operator_kube
    quiet_kopf_logs()

    def start(lead: Any = None, wait: bool = True, **overrides: Any) -> KopfRunner:
        memo = kopf.Memo(settings=settings_for(kube, catalog, **overrides))
        return kopf_runner(memo=memo, lead=lead, wait=wait)

    return start


Write = tuple[str, str, str | None]


def writes(kube: KubeServer, since: int = 0) -> list[Write]:
    """(verb, plural[/subresource], name) of every write request after index ``since``."""
    def read() -> list[Write]:
        out: list[Write] = []
        for request in kube.emulator._requests[since:]:
            method = str(request.method).upper().rsplit(".", 1)[-1]
            if method in ("GET", "HEAD") or request.resource is None:
                continue
            plural = request.resource.plural or ""
            if request.subresource:
                plural += "/" + request.subresource
            out.append((method, plural, request.name))
        return out

    return kube.call(read)


def request_count(kube: KubeServer) -> int:
    return kube.call(lambda: len(kube.emulator._requests))


class WriteLog:
    """The emulator's write requests: ``mark()`` a point, ``since()`` what came after."""

    def __init__(self, kube: KubeServer) -> None:
        self.kube = kube
        self.point = 0

    def mark(self) -> None:
        self.point = request_count(self.kube)

    def since(self) -> list[Write]:
        return writes(self.kube, self.point)


@pytest.fixture
def write_log(kube: KubeServer) -> WriteLog:
    return WriteLog(kube)


def deployment_manifest(name: str = "macaron", **spec: Any) -> dict[str, Any]:
    """A MoLDeployment over the seeded demo adapters; ``spec`` overrides top-level keys."""
    body: dict[str, Any] = {
        "baseModel": {"name": "tiny-llama", "uri": "file:///models/tiny-llama"},
        "engine": {"maxLoras": 4, "maxLoraRank": 16, "maxCpuLoras": 8},
        "nodePool": {"gpusPerReplica": 0},
        "replicas": 2,
        "adapterNamespaces": ["acme"],
        "experts": [
            {"name": "chat", "adapter": "demo/chat@stable"},
            {"name": "coding", "adapter": "demo/coding@stable",
             "canary": {"adapter": "demo/coding@candidate", "steps": [50, 100],
                        "interval": "1m"}},
            {"name": "router", "adapter": "demo/router@stable"},
        ],
        "router": {"mode": "auto", "classifier": {"expert": "router"}, "default": "chat",
                   "replicas": 1},
    }
    body.update(spec)
    return {"apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
            "metadata": {"name": name, "namespace": "default"}, "spec": body}


@pytest.fixture
def make_manifest() -> Callable[..., dict[str, Any]]:
    return deployment_manifest


@pytest.fixture
def own_catalog(tmp_path: Path) -> Iterator[LiveCatalog]:
    """A seeded catalog of this test's own (running), to stop and start at will."""
    (tmp_path / "own-catalog").mkdir()
    with seeded_catalog(tmp_path / "own-catalog") as live:
        yield live


@pytest.fixture
def llmisvc() -> ResourceSpec:
    """KServe's LLMInferenceService resource, for ``kube.register``."""
    return LLMISVC
