"""Progress of a long ``pip install``, one short line at a time (scripts/engine-venv.sh).

Installing vLLM's CPU build takes minutes; with ``pip -q`` nothing shows in that time,
and pip's own output is hundreds of lines. This filter reads pip's output on stdin and
writes to stderr what a person needs: how many packages are resolved, the large
downloads with their size, that the install itself has started (pip is silent while it
unpacks), a heartbeat while it is, and pip's errors in full.

    pip install ... 2>&1 | python3 pip_progress.py "engine venv: [3/4]"

Standard library only: it runs with the Python that builds the venv, before anything
is installed (the script's path is given, not ``-m``).
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator

_COLLECTING = re.compile(r"^(?:Collecting|Processing) (?:\S*/)?(\S+)")
_DOWNLOAD = re.compile(r"^\s*Downloading (?:\S*/)?(\S+?)(?:-\d\S*)?\.(?:whl|tar\.gz|zip) "
                       r"\(([\d.]+) (kB|MB|GB)\)")
_INSTALLING = re.compile(r"^Installing collected packages: (.*)")
_DONE = re.compile(r"^Successfully installed (.*)")
_ERROR = re.compile(r"^(ERROR|error):")
BIG_MB = 5.0  # downloads at least this large are named
EVERY = 20  # a "resolved" line every this many packages
HEARTBEAT = 30.0  # seconds of silence before a "still ..." line


class PipProgress:
    """Turns pip's lines into progress lines (``say``); pure but for the clock."""

    def __init__(self, prefix: str, say: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.prefix, self._say, self.clock = prefix, say, clock
        self.collected = 0
        self.doing = "resolving packages"
        self.started = clock()
        self.last = self.started

    def say(self, text: str) -> None:
        self.last = self.clock()
        self._say(f"{self.prefix} {text}")

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        if found := _COLLECTING.match(line):
            self.collected += 1
            if self.collected == 1 or self.collected % EVERY == 0:
                self.say(f"resolving: {self.collected} packages so far ({found.group(1)})")
        elif found := _DOWNLOAD.match(line):
            size, unit = float(found.group(2)), found.group(3)
            mb = size / 1000 if unit == "kB" else size * 1000 if unit == "GB" else size
            if mb >= BIG_MB:
                self.say(f"downloading {found.group(1)} ({found.group(2)} {unit})")
        elif found := _INSTALLING.match(line):
            count = len([p for p in found.group(1).split(",") if p.strip()])
            self.doing = f"installing {count} packages"
            self.say(f"{self.doing} (unpacking takes a minute or two) ...")
        elif found := _DONE.match(line):
            count = len(found.group(1).split())
            self.doing = "done"
            self.say(f"installed {count} packages in {self.clock() - self.started:.0f}s")
        elif _ERROR.match(line):
            self.say(line)

    def tick(self) -> None:
        """Say that pip is still at it when it has been silent for a while."""
        now = self.clock()
        if self.doing != "done" and now - self.last >= HEARTBEAT:
            self.say(f"still {self.doing} ({now - self.started:.0f}s)")

    def run(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.feed(line)


@contextlib.contextmanager
def heartbeat(progress: PipProgress, every: float = 5.0) -> Iterator[PipProgress]:
    """``progress.tick()`` every ``every`` seconds while the block runs: pip is silent
    for minutes while it unpacks, and the heartbeat is what says it still works."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            progress.tick()

    threading.Thread(target=beat, daemon=True).start()
    try:
        yield progress
    finally:
        stop.set()


def main(argv: list[str]) -> int:
    prefix = argv[0] if argv else "pip:"
    progress = PipProgress(prefix, lambda text: print(text, file=sys.stderr, flush=True))
    with heartbeat(progress):
        progress.run(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
