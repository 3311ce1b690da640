"""Shared fixtures: real PostgreSQL, S3 (moto server), Kubernetes API emulator (+ kopf),
Prometheus, all on loopback and always cleaned up. Documented in docs/testing.md.

Tests using ``postgres_cluster`` get the ``postgres`` marker and tests using
``prometheus`` the ``prometheus`` marker automatically, so ``-m "not postgres"`` works.
A missing binary fails the test with a message to run ``make deps``; fixtures never skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

# Imported inside the fixtures: collecting a test that needs none of them stays fast.
if TYPE_CHECKING:
    from mol_testkit.kube import KubeServer
    from mol_testkit.kube_client import KubeClient
    from mol_testkit.kube_kopf import KopfRunner
    from mol_testkit.postgres import PostgresCluster
    from mol_testkit.prometheus import PrometheusServer
    from mol_testkit.s3 import S3Server

_AUTO_MARKERS = {"postgres_cluster": "postgres", "prometheus": "prometheus"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, marker in _AUTO_MARKERS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


# -- PostgreSQL ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One throwaway PostgreSQL 15 server for the session (~2 s to start)."""
    from mol_testkit.postgres import PostgresCluster

    with PostgresCluster() as cluster:
        yield cluster


# -- S3 ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on loopback for the session; fake AWS credentials and region in
    the environment, AWS config files pointed away, so nothing reaches real AWS."""
    from mol_testkit.s3 import S3Server

    with pytest.MonkeyPatch.context() as mp, S3Server() as server:
        for key, value in server.env.items():
            if key != "AWS_ENDPOINT_URL_S3":
                mp.setenv(key, value)
        mp.setenv("AWS_CONFIG_FILE", "/nonexistent/mol-test-aws-config")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/mol-test-aws-credentials")
        mp.delenv("AWS_PROFILE", raising=False)
        yield server


@pytest.fixture
def s3_client(s3_server: S3Server) -> Iterator[Any]:
    """A boto3 S3 client bound to ``s3_server`` (closed after the test)."""
    client = s3_server.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[str]:
    """A fresh, empty bucket (unique name) for this test; emptied and deleted after."""
    from mol_testkit.s3 import delete_bucket, unique_bucket_name

    client = s3_server.client()
    name = unique_bucket_name()
    try:
        client.create_bucket(Bucket=name)
        yield name
    finally:
        delete_bucket(client, name)
        client.close()


# -- Kubernetes --------------------------------------------------------------------------


@pytest.fixture
def kube() -> Iterator[KubeServer]:
    """A fresh Kubernetes API emulator per test (milliseconds to start), with our
    resources registered and the ``default`` Namespace created."""
    from mol_testkit.kube import KubeServer

    with KubeServer() as server:
        yield server


@pytest.fixture
def kube_client(kube: KubeServer) -> Iterator[KubeClient]:
    """A sync client for ``kube`` (closed after the test)."""
    with kube.client() as client:
        yield client


@pytest.fixture
def kopf_runner(kube: KubeServer) -> Iterator[Callable[..., KopfRunner]]:
    """Start kopf in-process against ``kube``: ``kopf_runner(registry=reg)`` (keyword
    arguments of :class:`KopfRunner`; ``wait=False`` for a replica that may stand by);
    every runner started is stopped after the test."""
    from mol_testkit.kube_kopf import KopfRunner

    runners: list[KopfRunner] = []

    def start(wait: bool = True, **kwargs: Any) -> KopfRunner:
        runner = KopfRunner(kube.url, **kwargs)
        runners.append(runner)
        return runner.start(wait=wait)

    yield start
    for runner in reversed(runners):
        runner.stop()


# -- Prometheus --------------------------------------------------------------------------


@pytest.fixture
def prometheus() -> Iterator[PrometheusServer]:
    """A real Prometheus on loopback (~1 s to start), 1 s scrape/evaluation interval and
    no targets yet: call ``prometheus.configure(targets=["127.0.0.1:PORT"])``."""
    from mol_testkit.prometheus import PrometheusServer

    with PrometheusServer() as server:
        yield server
