"""A call cut off on a kept-alive connection is sent once more only when idempotent."""

from __future__ import annotations

import httpx
import pytest

from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient

ANSWER = {"status": "ok"}


class CutOnce:
    """Cuts the first request off (as a server closing a kept-alive connection does)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request.method)
        if len(self.calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, json=ANSWER)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_sync_idempotent_calls_are_sent_again(method: str) -> None:
    cut = CutOnce()
    with CatalogClient("http://catalog.test", "t", transport=httpx.MockTransport(cut)) as c:
        assert c.request(method, "/healthz").json() == ANSWER
    assert cut.calls == [method, method]


def test_sync_post_is_not_sent_twice() -> None:
    cut = CutOnce()
    client = CatalogClient("http://catalog.test", "t", transport=httpx.MockTransport(cut))
    with client as c, pytest.raises(CatalogError) as caught:
        c.request("POST", "/v1/tokens", json={})
    assert caught.value.status == 0
    assert cut.calls == ["POST"]


async def test_async_idempotent_call_is_sent_again_and_post_is_not() -> None:
    cut = CutOnce()
    async with AsyncCatalogClient("http://catalog.test", "t",
                                  transport=httpx.MockTransport(cut)) as c:
        assert (await c.request("GET", "/healthz")).json() == ANSWER
        cut.calls.clear()
        with pytest.raises(CatalogError):
            await c.request("POST", "/v1/tokens", json={})
    assert cut.calls == ["POST"]
