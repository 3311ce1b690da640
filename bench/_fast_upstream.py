"""A near-free OpenAI-style upstream for proxy-overhead runs (run as a script).

`POST /v1/chat/completions` or `/v1/completions` answers a fixed completion, or, when
the body asks for `"stream": true`, a fixed SSE stream of `--chunks` events sent at
once (so time to first byte and time to last byte differ by microseconds); `GET
/health` answers 200 and `GET /metrics` an idle vLLM-style exposition, so routers
that health-check and scrape their engines accept it. httptools + uvloop: it must
cost far less per request than any proxy in front of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import cast

import httptools
import uvloop

COMPLETION = json.dumps({
    "id": "cmpl-bench", "object": "chat.completion", "created": 0, "model": "tiny",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Hello from the upstream."}}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 6, "total_tokens": 14},
}).encode()  # fmt: skip
METRICS = (
    b'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0\n'
    b'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0\n'
    b'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0\n'
)


def sse_body(chunks: int) -> bytes:
    events = []
    for i in range(chunks):
        delta = {"id": "cmpl-bench", "object": "chat.completion.chunk", "created": 0,
                 "model": "tiny", "choices": [{"index": 0, "delta": {"content": f"w{i} "},
                                                "finish_reason": None}]}  # fmt: skip
        events.append(b"data: " + json.dumps(delta).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def response(status: bytes, ctype: bytes, body: bytes) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype +
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip


class Upstream(asyncio.Protocol):
    def __init__(self, stream: bytes) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.stream = stream
        self.url = b""
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        if url.startswith(b"/health"):
            out = response(b"200 OK", b"text/plain", b"")
        elif url.startswith(b"/metrics"):
            out = response(b"200 OK", b"text/plain; version=0.0.4", METRICS)
        elif b'"stream": true' in body or b'"stream":true' in body:
            out = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n" + self.stream)  # fmt: skip
        else:
            out = response(b"200 OK", b"application/json", COMPLETION)
        self.transport.write(out)
        if not self.parser.should_keep_alive():
            self.transport.close()


async def serve(port: int, chunks: int) -> None:
    loop = asyncio.get_running_loop()
    stream = sse_body(chunks)
    server = await loop.create_server(lambda: Upstream(stream), "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--chunks", type=int, default=8, help="SSE events per streamed reply")
    args = p.parse_args()
    uvloop.run(serve(args.port, args.chunks))


if __name__ == "__main__":
    main()
