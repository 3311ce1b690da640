"""A bare aiohttp reverse proxy (run as a script): the floor an aiohttp router sits on.

aiohttp server + one pooled `ClientSession`, request body read whole, response
streamed back chunk by chunk; no routing, no parsing, no metrics.
"""

from __future__ import annotations

import argparse

import aiohttp
from aiohttp import web

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def build(upstream: str) -> web.Application:
    app = web.Application()

    async def start(app: web.Application) -> None:
        app["client"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def stop(app: web.Application) -> None:
        await app["client"].close()

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        client: aiohttp.ClientSession = request.app["client"]
        async with client.request(request.method, upstream + request.path_qs,
                                  data=body, headers=headers) as up:  # fmt: skip
            out = web.StreamResponse(status=up.status)
            for k, v in up.headers.items():
                if k.lower() not in HOP:
                    out.headers[k] = v
            await out.prepare(request)
            async for chunk in up.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:9000")
    args = p.parse_args()
    web.run_app(build(args.upstream.rstrip("/")), host="127.0.0.1", port=args.port,
                print=None, access_log=None)  # fmt: skip


if __name__ == "__main__":
    main()
