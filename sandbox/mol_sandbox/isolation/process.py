"""One session's interpreter: started under bubblewrap in its cgroups, spoken to in
frames, stopped with everything it started.

bubblewrap's own process is pid 1 inside, and its environment is readable there, so it
starts with an empty one, from / (a shell adds the working folder as PWD). Where no
cgroup binds the session, it runs as a non-root uid instead (``setpriv``), so that
``RLIMIT_NPROC`` binds (it never binds root).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from mol_sandbox.isolation.bwrap import SandboxSpec, command
from mol_sandbox.isolation.cgroups import Cgroups, SessionCgroup
from mol_sandbox.repl import driver as driver_module
from mol_sandbox.repl.framing import HEADER, FrameError, decode, encode, frame_size

DRIVER = str(Path(driver_module.__file__).resolve())
ROOT_NAMES = ("bin", "lib", "lib32", "lib64", "libx32", "sbin")


class InterpreterDied(Exception):
    """The interpreter exited, was killed, or wrote something that is not a reply."""


def root_links() -> dict[str, str | None]:
    """The host's /bin, /lib, ...: a symlink's target, or None for a real folder."""
    found: dict[str, str | None] = {}
    for name in ROOT_NAMES:
        path = Path("/") / name
        if path.is_symlink():
            found[name] = os.readlink(path)
        elif path.is_dir():
            found[name] = None
    return found


class Interpreter:
    def __init__(self, proc: asyncio.subprocess.Process, cgroup: SessionCgroup | None,
                 max_frame: int) -> None:
        self.proc = proc
        self.cgroup = cgroup
        self.max_frame = max_frame

    @classmethod
    async def start(cls, spec: SandboxSpec, cgroups: Cgroups | None,
                    ready_within: float) -> Interpreter:
        cgroup = await asyncio.to_thread(cgroups.create) if cgroups else None
        argv = command(spec, cgroup.procs_files if cgroup else ())
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, env={}, cwd="/", start_new_session=True,
                close_fds=True)
        except BaseException:
            if cgroup:
                await asyncio.to_thread(cgroup.close)
            raise
        # Three outputs of output_bytes each, JSON-escaped (at most 6 bytes a byte).
        interp = cls(proc, cgroup, max_frame=6 * 3 * spec.output_bytes + 4096)
        try:
            ready = await asyncio.wait_for(interp._receive(), ready_within)
            if ready.get("ready") is not True:
                raise InterpreterDied("the interpreter did not say it was ready")
        except BaseException:
            await interp.stop()
            raise
        return interp

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def call(self, code: str) -> dict[str, Any]:
        """Run ``code``; the driver's reply. The caller bounds the time."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(encode({"code": code}))
            await self.proc.stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise InterpreterDied(f"the interpreter is gone ({exc})") from None
        return await self._receive()

    async def _receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        try:
            header = await self.proc.stdout.readexactly(HEADER.size)
            body = await self.proc.stdout.readexactly(frame_size(header, self.max_frame))
            return decode(body)
        except asyncio.IncompleteReadError:
            raise InterpreterDied("the interpreter exited") from None
        except FrameError as exc:
            raise InterpreterDied(f"the interpreter wrote {exc}") from None

    def out_of_memory(self) -> bool:
        return self.cgroup.oom_killed() if self.cgroup else False

    async def stop(self) -> None:
        """Kill bwrap (its namespace dies with it) and whatever is left in the cgroups."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        if self.cgroup:
            await asyncio.to_thread(self.cgroup.close)
        with contextlib.suppress(ProcessLookupError):
            await asyncio.wait_for(self.proc.wait(), 5.0)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        with contextlib.suppress(TimeoutError, OSError):
            await asyncio.wait_for(self._drain(), 5.0)

    async def _drain(self) -> None:
        """Read to EOF: then nothing inside holds the pipe any more (without cgroups the
        namespace's processes die just after bwrap does)."""
        assert self.proc.stdout is not None
        while await self.proc.stdout.read(65536):
            pass
