"""The Kubernetes API emulator served on loopback, with the resources we use registered.

``KubeServer`` runs :class:`~mol_testkit.kube_emulator.KubeEmulator` in its own
thread and event loop on 127.0.0.1 (real HTTP), so sync tests, async tests and an
in-process kopf operator all talk to it the same way. The ``default`` Namespace exists
from the start. Clients: :mod:`.kube_client`; kopf: :mod:`.kube_kopf`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import aiohttp.web
import kmock

from mol_platform.contract import spec as mold
from mol_testkit.kube_client import AsyncKubeClient, KubeClient, ResourceSpec
from mol_testkit.kube_emulator import KubeEmulator
from mol_testkit.net import LOOPBACK, InfraError

T = TypeVar("T")


def _r(api_version: str, plural: str, kind: str, **kw: Any) -> ResourceSpec:
    group, _, version = api_version.rpartition("/")
    return ResourceSpec(group, version, plural, kind, **kw)


MOLDEPLOYMENT = _r(mold.API_VERSION, mold.PLURAL, mold.KIND, shortnames=(mold.SHORT_NAME,))

DEFAULT_RESOURCES: tuple[ResourceSpec, ...] = (
    MOLDEPLOYMENT,
    _r("v1", "namespaces", "Namespace", namespaced=False, shortnames=("ns",)),
    _r("v1", "configmaps", "ConfigMap", subresources=(), shortnames=("cm",)),
    _r("v1", "secrets", "Secret", subresources=()),
    _r("v1", "services", "Service", shortnames=("svc",)),
    _r("v1", "pods", "Pod", shortnames=("po",)),
    _r("v1", "events", "Event", subresources=(), shortnames=("ev",)),
    _r("v1", "serviceaccounts", "ServiceAccount", subresources=(), shortnames=("sa",)),
    _r("apps/v1", "deployments", "Deployment", subresources=("status", "scale"),
       shortnames=("deploy",)),
    _r("discovery.k8s.io/v1", "endpointslices", "EndpointSlice", subresources=()),
    _r("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", shortnames=("pdb",)),
    _r("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", subresources=(),
       shortnames=("netpol",)),
    _r("coordination.k8s.io/v1", "leases", "Lease", subresources=()),
    _r("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition",
       namespaced=False, shortnames=("crd",)),
    _r("keda.sh/v1alpha1", "scaledobjects", "ScaledObject", shortnames=("so",)),
    _r("monitoring.coreos.com/v1", "servicemonitors", "ServiceMonitor", shortnames=("smon",)),
    _r("monitoring.coreos.com/v1", "podmonitors", "PodMonitor", shortnames=("pmon",)),
    _r("monitoring.coreos.com/v1", "prometheusrules", "PrometheusRule", shortnames=("promrule",)),
    _r("serving.kserve.io/v1beta1", "inferenceservices", "InferenceService",
       shortnames=("isvc",)),
)

_VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}


def specs_from_crd(crd: Mapping[str, Any]) -> list[ResourceSpec]:
    """The served versions of a CustomResourceDefinition manifest as ResourceSpecs."""
    spec = crd["spec"]
    names = spec["names"]
    return [
        ResourceSpec(
            group=spec["group"],
            version=v["name"],
            plural=names["plural"],
            kind=names["kind"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            subresources=tuple(v.get("subresources") or {}),
            shortnames=tuple(names.get("shortNames") or ()),
        )
        for v in spec["versions"]
        if v.get("served", True)
    ]


class KubeServer:
    """The emulator on 127.0.0.1:<free port> in a background thread.

    ``start()``/``stop()`` or ``with``; ``url``; ``register(spec)``/``register_crd(crd)``;
    ``client()`` (sync) and ``async_client()``; ``emulator`` for kmock's DSL and
    ``emulator.objects`` (read them from the test thread only while nothing writes).
    """

    def __init__(self, resources: Iterable[ResourceSpec] = DEFAULT_RESOURCES) -> None:
        self.resources: dict[tuple[str, str, str], ResourceSpec] = {}
        self._initial = list(resources)
        self._emulator: KubeEmulator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.port = 0

    @property
    def url(self) -> str:
        if not self.port:
            raise InfraError("the Kubernetes emulator is not started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def emulator(self) -> KubeEmulator:
        if self._emulator is None:
            raise InfraError("the Kubernetes emulator is not started")
        return self._emulator

    # -- lifecycle ---------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> KubeServer:
        if self._thread is not None:
            raise InfraError("the Kubernetes emulator is already started")
        self._thread = threading.Thread(target=self._run, name="kube-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._failure is not None:
            self.stop()
            raise InfraError(f"the Kubernetes emulator did not start: {self._failure!r}")
        for spec in self._initial:
            self.register(spec)
        with self.client() as client:
            client.create({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": "default"}})
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start()
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        emulator = KubeEmulator()
        async with emulator:
            runner = aiohttp.web.ServerRunner(aiohttp.web.Server(emulator), shutdown_timeout=2.0)
            await runner.setup()
            try:
                site = aiohttp.web.TCPSite(runner, LOOPBACK, 0)
                await site.start()
                self.port = int(runner.addresses[0][1])
                self._emulator = emulator
                self._ready.set()
                await self._stopping.wait()
                emulator.close_watches()
                await asyncio.sleep(0.05)
            finally:
                await runner.cleanup()

    def stop(self, timeout: float = 15.0) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stopping is not None and thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        thread.join(timeout)
        self._emulator = None
        self.port = 0
        if thread.is_alive():
            raise InfraError("the Kubernetes emulator thread did not stop")

    def __enter__(self) -> KubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in the emulator's event loop thread and return its result."""
        if self._loop is None:
            raise InfraError("the Kubernetes emulator is not started")

        async def wrapper() -> T:
            return fn()

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(
            wrapper(), self._loop
        )
        return future.result(10)

    # -- resources ---------------------------------------------------------------

    def register(self, spec: ResourceSpec) -> ResourceSpec:
        """Serve ``spec`` (discovery, CRUD, watch); idempotent."""
        info = kmock.ResourceInfo(
            namespaced=spec.namespaced,
            kind=spec.kind,
            singular=spec.kind.lower(),
            verbs=set(_VERBS),
            shortnames=set(spec.shortnames),
            subresources=set(spec.subresources),
        )
        key = f"{spec.group}/{spec.version}/{spec.plural}" if spec.group else (
            f"{spec.version}/{spec.plural}"
        )

        def add() -> None:
            self.emulator.resources[key] = info

        self.call(add)
        self.resources[(spec.group, spec.version, spec.plural)] = spec
        return spec

    def register_crd(self, crd: Mapping[str, Any]) -> list[ResourceSpec]:
        """Serve every served version of a CRD manifest (e.g. one from the chart)."""
        return [self.register(spec) for spec in specs_from_crd(crd)]

    def resolve(self, ref: str) -> ResourceSpec:
        """A registered resource by kind (``Deployment``), plural (``deployments``),
        short name (``mold``), ``plural.group`` or ``apiVersion/Kind``."""
        wanted = ref.lower()
        found = {
            spec for spec in self.resources.values()
            if wanted in (spec.kind.lower(), spec.plural, f"{spec.plural}.{spec.group}",
                          f"{spec.api_version}/{spec.kind}".lower(), *spec.shortnames)
        }
        if len(found) == 1:
            return found.pop()
        if not found:
            raise KeyError(f"no registered resource {ref!r}: register it with kube.register(...)")
        raise KeyError(f"{ref!r} is ambiguous: use apiVersion/Kind, one of "
                       f"{sorted(f'{s.api_version}/{s.kind}' for s in found)}")

    def spec_for(self, manifest: Mapping[str, Any]) -> ResourceSpec:
        return self.resolve(f"{manifest['apiVersion']}/{manifest['kind']}")

    def client(self) -> KubeClient:
        """A sync client (httpx) bound to this server; close it or use ``with``."""
        return KubeClient(self.url, self.resolve)

    def async_client(self) -> AsyncKubeClient:
        """An async client (httpx) bound to this server; ``async with`` it."""
        return AsyncKubeClient(self.url, self.resolve)
