"""The operator asks the catalog for an unpinned base's current revision at most once per
``ttl``: a thousand deployments on one base cost one call, a new revision still shows."""

from __future__ import annotations

from typing import Any

from mol_operator.catalog import BaseRevisions
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_testkit.lora import SyntheticLlama


async def test_current_revision_is_reused_within_the_ttl_only(own_catalog: Any) -> None:
    model = SyntheticLlama()
    remembered, fresh = BaseRevisions(ttl=3600.0), BaseRevisions(ttl=0.0)
    async with AsyncCatalogClient(own_catalog.url, own_catalog.admin_token) as client:
        assert await remembered.current(client, model.name) == model.revision
        assert await fresh.current(client, model.name) == model.revision
        with own_catalog.client() as admin:
            admin.request("POST", "/v1/base-models", json={**model.base_body(),
                                                           "revision": "r2"})
        assert (await client.get_base(model.name)).current == "r2"
        assert await remembered.current(client, model.name) == model.revision
        assert await fresh.current(client, model.name) == "r2"
