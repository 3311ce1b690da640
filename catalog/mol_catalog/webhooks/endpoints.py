"""/v1/namespaces/{ns}/webhooks (admin): receivers of the namespace's events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import json_response
from mol_catalog.util import MAX_BIGINT
from mol_catalog.webhooks import service
from mol_catalog.webhooks.schemas import (
    DeliveryListOut,
    WebhookCreate,
    WebhookListOut,
    WebhookOut,
)

router = APIRouter(tags=["webhooks"])
WebhookId = Annotated[int, Path(ge=1, le=MAX_BIGINT)]


@router.post("/v1/namespaces/{ns}/webhooks", status_code=201, response_model=WebhookOut)
async def create_webhook(ns: str, body: WebhookCreate, catalog: CatalogDep,
                         who: PrincipalDep) -> Response:
    """Register a webhook for the namespace's events from now on (the secret is never
    returned). A URL that names a loopback, private, link-local or cloud metadata
    address is refused (422) unless the catalog's WEBHOOK_ALLOW setting lists it."""
    who.require_admin()
    async with catalog.db.unit() as uow:
        out = await service.create(uow, ns, body, who.name,
                                   catalog.settings.webhook_allowlist)
    return json_response(out, 201)


@router.get("/v1/namespaces/{ns}/webhooks", response_model=WebhookListOut)
async def list_webhooks(ns: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    who.require_admin()
    async with catalog.db.read() as conn:
        items = await service.list_webhooks(conn, ns)
    return json_response({"items": items})


@router.delete("/v1/namespaces/{ns}/webhooks/{webhook_id}", status_code=204,
               response_class=Response)
async def delete_webhook(ns: str, webhook_id: WebhookId, catalog: CatalogDep,
                         who: PrincipalDep) -> Response:
    """Delete the webhook; its pending deliveries are dropped."""
    who.require_admin()
    async with catalog.db.unit() as uow:
        await service.delete(uow, ns, webhook_id)
    return Response(status_code=204)


@router.get("/v1/namespaces/{ns}/webhooks/{webhook_id}/deliveries",
            response_model=DeliveryListOut)
async def list_deliveries(ns: str, webhook_id: WebhookId, catalog: CatalogDep,
                          who: PrincipalDep,
                          limit: int = Query(50, ge=1, le=500)) -> Response:
    """The webhook's deliveries, newest first: status, attempts, the last error."""
    who.require_admin()
    async with catalog.db.read() as conn:
        items = await service.deliveries(conn, ns, webhook_id, limit)
    return json_response({"items": items})
