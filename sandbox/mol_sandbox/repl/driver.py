"""The interpreter's driver, run inside the sandbox as ``python3 -I driver.py``.

Standard library only: it runs on the system's Python, which sees nothing of the
service's packages. It reads framed requests (4-byte big-endian length, UTF-8 JSON
``{"code"}``) on stdin and writes framed replies ``{stdout, stderr, result, error,
truncated}`` on the stdout it was started with. Before the first request it moves that
channel off fds 0-2 (user code writing to fd 1 cannot forge a reply), sets its hard
rlimits (which the code cannot raise: the sandbox has no capabilities) and says ready.
Every cell runs in one globals dict, so state persists between calls; a last expression
is evaluated and its ``repr`` is the result.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import os
import resource
import struct
import sys
import traceback
from typing import Any, BinaryIO

CELL = "<cell>"
_HEADER = struct.Struct(">I")


class Capped(io.TextIOBase):
    """A text stream keeping its first ``cap`` bytes (UTF-8), then only counting."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
        self.parts: list[str] = []
        self.size = 0
        self.truncated = False

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if self.truncated:
            return len(s)
        room = self.cap - self.size
        data = s.encode("utf-8", "replace")
        if len(data) > room:
            data = data[:room]
            self.truncated = True
        self.parts.append(data.decode("utf-8", "ignore"))
        self.size += len(data)
        return len(s)

    def value(self) -> str:
        return "".join(self.parts)


def _clip(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8", "replace")
    if len(data) <= cap:
        return data.decode("utf-8"), False
    return data[:cap].decode("utf-8", "ignore"), True


def _format_error(exc: BaseException) -> str:
    """The traceback from the cell's own frames on (the driver's are left out)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CELL:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def run_cell(code: str, env: dict[str, Any], cap: int) -> dict[str, Any]:
    """Run one cell in ``env``; its output, result or error, each within ``cap`` bytes."""
    out, err = Capped(cap), Capped(cap)
    result: str | None = None
    error: str | None = None
    clipped = False
    sys.stdout, sys.stderr = out, err
    try:
        tree = ast.parse(code, CELL, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body[-1].value)
            tree.body.pop()
        exec(compile(tree, CELL, "exec"), env)
        if last is not None:
            value = eval(compile(last, CELL, "eval"), env)
            if value is not None:
                result, clipped = _clip(repr(value), cap)
    except BaseException as exc:  # the cell's own SystemExit and KeyboardInterrupt too
        error, cut = _clip(_format_error(exc), cap)
        clipped = clipped or cut
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    return {"stdout": out.value(), "stderr": err.value(), "result": result, "error": error,
            "truncated": out.truncated or err.truncated or clipped}


def _read(channel: BinaryIO, size: int) -> bytes | None:
    buf = b""
    while len(buf) < size:
        chunk = channel.read(size - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _send(channel: BinaryIO, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    channel.write(_HEADER.pack(len(data)) + data)
    channel.flush()


def _set_limits(args: list[str]) -> int:
    """``--memory B --nproc N --fsize B --output B``: hard rlimits; returns the output cap."""
    opts = dict(zip(args[::2], (int(v) for v in args[1::2]), strict=True))
    for res, key in ((resource.RLIMIT_AS, "--memory"), (resource.RLIMIT_NPROC, "--nproc"),
                     (resource.RLIMIT_FSIZE, "--fsize")):
        resource.setrlimit(res, (opts[key], opts[key]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return opts["--output"]


def main() -> None:
    channel_in = os.fdopen(os.dup(0), "rb", buffering=0)
    channel_out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    cap = _set_limits(sys.argv[1:])
    env: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    _send(channel_out, {"ready": True})
    while True:
        header = _read(channel_in, _HEADER.size)
        if header is None:
            return
        body = _read(channel_in, _HEADER.unpack(header)[0])
        if body is None:
            return
        _send(channel_out, run_cell(json.loads(body)["code"], env, cap))


if __name__ == "__main__":
    main()
