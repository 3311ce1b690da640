"""Test infrastructure shared by every component's tests.

Among them, real services on loopback that the fixtures in ``tests/fixtures_infra.py``
start and always clean up: a throwaway PostgreSQL cluster (:mod:`.postgres`), an S3 API
server (:mod:`.s3`), a Kubernetes API emulator with a kopf runner (:mod:`.kube`,
:mod:`.kube_kopf`, :mod:`.kube_validate`) and Prometheus (:mod:`.prometheus`). Import
the submodule you need; this package imports nothing heavy. See docs/testing.md.
"""
