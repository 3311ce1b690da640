"""Test infrastructure shared by every component's tests.

Real services on loopback, started and always cleaned up by the fixtures in
``tests/fixtures_infra.py``: a throwaway PostgreSQL cluster (:mod:`.postgres`), an S3
API server (:mod:`.s3`), a Kubernetes API emulator with a kopf runner (:mod:`.kube`),
Prometheus (:mod:`.prometheus`). Import the submodule you need; this package imports
nothing heavy so that the engine side never pays for it. See docs/testing.md.
"""
