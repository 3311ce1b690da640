"""Subscribe to one vLLM engine's KV-cache events and print them as JSON lines.

Run with the engine venv's Python (it has vLLM's own decoder, pyzmq and msgspec):
``python kv_events_listener.py tcp://127.0.0.1:PORT TOPIC``, the engine started with
the same endpoint in ``--kv-events-config`` (vLLM connects to an endpoint that names a
host and binds one that says ``*``: this socket binds, so nothing listens beyond
loopback). Each batch's events are
printed one a line as ``{"kind": <vLLM tag>, **fields}``, bytes as hex; the line
``ready`` is printed once subscribed.
"""

import json
import sys
from typing import Any

# Only in the engine venv, which runs this file.
import msgspec  # type: ignore[import-not-found]
import zmq  # type: ignore[import-not-found]
from vllm.distributed.kv_events import KVEventBatch  # type: ignore[import-not-found]


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def main(endpoint: str, topic: str) -> None:
    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.bind(endpoint)  # the engine connects: its endpoint names a host, not ``*``
    sock.setsockopt_string(zmq.SUBSCRIBE, topic)
    print("ready", flush=True)
    while True:
        _topic, _seq, payload = sock.recv_multipart()
        batch = decoder.decode(payload)
        for event in batch.events:
            fields = {f: _plain(getattr(event, f)) for f in event.__struct_fields__}
            print(json.dumps({"kind": type(event).__name__, **fields}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
