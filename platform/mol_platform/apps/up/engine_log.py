"""What ``mol up`` says while the engine starts: a phase line, not vLLM's raw log.

vLLM writes a few hundred lines while it starts (banners, every route, warnings that
are expected on a CPU build such as "Triton is not installed"). ``mol up`` keeps them
all in the engine's log file and prints one short line per phase instead:

    mol up: engine [4/6] loading the weights: 1/1 shards (35s)

:class:`StartupView` reads the log as it grows (:meth:`StartupView.feed` takes its
text, ``\\r``-redrawn progress bars included) and :meth:`StartupView.line` says where
the start-up is. It is pure (no I/O): tests feed it a recorded vLLM log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# (phase, what starts it); the phases are in the order vLLM goes through them.
PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("starting vLLM", re.compile(r"non-default args|\bversion \d+\.\d+")),
    ("reading the model's config", re.compile(r"Resolved architecture")),
    ("starting the engine process", re.compile(r"Initializing a V1 LLM engine")),
    ("loading the weights", re.compile(r"Starting to load model|Loading safetensors")),
    ("sizing the KV cache and warming up", re.compile(r"KV cache|Loading weights took")),
    ("starting the HTTP server", re.compile(r"Starting vLLM (API )?server|Available routes")),
)
READY = re.compile(r"Application startup complete")
# Expected on vLLM's CPU build (no Triton kernels for CPUs); not a problem to report.
EXPECTED = re.compile(r"Triton|triton|LD_PRELOAD|ulimit|NUMA binding|FutureWarning|"
                      r"VLLM_CPU_NUM_OF_RESERVED_CPU|Model Runner V2")
PROBLEM = re.compile(r"\bERROR\b|Traceback \(most recent call last\)|\b\w+Error: ")
_PREFIX = re.compile(r"^\(\w+ pid=\d+\) (?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d "
                     r"\d\d:\d\d:\d\d \[[^\]]+\] ")
_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)")
_VERSION = re.compile(r"\bversion (\d+\.\d+\.\d+\S*)")
_LOADED = re.compile(r"Loading weights took ([\d.]+) seconds")
_KV = re.compile(r"KV cache size: ([\d,]+) tokens")
MAX_DETAIL = 90


def shorten(text: str, width: int = MAX_DETAIL) -> str:
    """At most ``width`` characters, cut at a word boundary with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text.rfind(" ", 0, width - 1)
    return text[:cut if cut > width // 2 else width - 1].rstrip(" ,;:") + "…"


def message(line: str) -> str:
    """A vLLM log line without its ``(Process pid=N) LEVEL date [file.py:N]`` prefix."""
    return _PREFIX.sub("", line.strip())


@dataclass
class StartupView:
    """The start-up as far as the log tells: the phase reached, its detail, problems."""

    phase: int = -1  # index into PHASES; -1: nothing logged yet
    detail: str = ""
    version: str = ""
    ready: bool = False
    problems: list[str] = field(default_factory=list)
    _partial: str = ""

    def feed(self, text: str) -> None:
        """More of the log (any cut: a line may arrive in two pieces)."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            for piece in line.split("\r"):  # a progress bar redraws itself with \r
                if piece.strip():
                    self._line(piece)

    def _line(self, raw: str) -> None:
        text = message(raw)
        for index, (_, pattern) in enumerate(PHASES):
            if index > self.phase and pattern.search(text):
                self.phase, self.detail = index, ""
        if (found := _VERSION.search(text)) and not self.version:
            self.version = found.group(1)
        if found := _SHARDS.search(text):
            self.detail = f"{found.group(2)}/{found.group(3)} shards"
        elif found := _LOADED.search(text):
            self.detail = f"weights loaded in {float(found.group(1)):.1f} s"
        elif found := _KV.search(text):
            self.detail = f"{found.group(1)} tokens of KV cache"
        if READY.search(text):
            self.ready = True
        if PROBLEM.search(raw) and not EXPECTED.search(raw):
            self.problems.append(shorten(text))

    def line(self, elapsed: float) -> str:
        """``engine [4/6] loading the weights: 1/1 shards (35s)``."""
        if self.ready:
            return f"engine ready ({elapsed:.0f}s)"
        if self.phase < 0:
            return f"engine [0/{len(PHASES)}] starting Python and importing vLLM ({elapsed:.0f}s)"
        name = PHASES[self.phase][0]
        if self.phase == 0 and self.version:
            name = f"{name} {self.version}"
        detail = f": {self.detail}" if self.detail else ""
        text = f"engine [{self.phase + 1}/{len(PHASES)}] {name}{detail} ({elapsed:.0f}s)"
        if self.problems:
            text += f"; last problem: {self.problems[-1]}"
        return text


class LogFollower:
    """Reads a growing log file into a :class:`StartupView` and says the phase line when
    the phase or its detail changes, and every ``quiet`` seconds while it does not."""

    def __init__(self, path: Path, say: Callable[[str], None], quiet: float = 15.0) -> None:
        self.path, self.say, self.quiet = path, say, quiet
        self.view = StartupView()
        self._offset = 0
        self._shown: tuple[int, str, int] | None = None
        self._said_at = 0.0

    def __call__(self, elapsed: float) -> None:
        try:
            with self.path.open("rb") as log:
                log.seek(self._offset)
                chunk = log.read()
        except OSError:
            chunk = b""
        self._offset += len(chunk)
        self.view.feed(chunk.decode(errors="replace"))
        state = (self.view.phase, self.view.detail, len(self.view.problems))
        if state != self._shown or elapsed - self._said_at >= self.quiet:
            self._shown, self._said_at = state, elapsed
            self.say(self.view.line(elapsed))
