"""The engine's start-up as ``mol up`` prints it: a recorded vLLM 0.32.0 CPU log
(tests/platform/data) fed through the formatter, whole and in arbitrary pieces."""

from __future__ import annotations

from pathlib import Path

import pytest

from mol_platform.apps.up.engine_log import PHASES, LogFollower, StartupView, message, shorten

RECORDED = Path(__file__).parent / "data" / "vllm-0.32.0-cpu-startup.log"


def lines_of_view(text: str, pieces: int) -> list[str]:
    """The phase lines the log yields when it arrives in ``pieces`` chunks."""
    view, said = StartupView(), list[str]()
    size = -(-len(text) // pieces)
    for start in range(0, len(text), size):
        view.feed(text[start:start + size])
        line = view.line(12)
        if not said or said[-1] != line:
            said.append(line)
    return said


def test_a_recorded_start_goes_through_every_phase_in_order() -> None:
    text = RECORDED.read_text()
    seen: list[int] = []
    view = StartupView()
    for raw in text.splitlines(keepends=True):
        view.feed(raw)
        if not seen or seen[-1] != view.phase:
            seen.append(view.phase)
    assert seen == list(range(-1, len(PHASES)))  # every phase, none skipped or repeated
    assert view.ready
    assert view.version == "0.32.0"
    assert view.problems == []  # the CPU build's Triton warnings are expected, not problems
    assert view.line(51) == "engine ready (51s)"


@pytest.mark.parametrize("pieces", [1, 7, 500])
def test_the_lines_are_short_whole_words_and_never_raw_vllm(pieces: int) -> None:
    said = lines_of_view(RECORDED.read_text(), pieces)
    assert said[-1] == "engine ready (12s)"
    for line in said:
        assert len(line) <= 120, line
        for raw in ("Triton", "pid=", "INFO"):
            assert raw not in line, line


def test_the_weights_phase_shows_the_shards_then_the_load_time() -> None:
    view = StartupView()
    text = RECORDED.read_text()
    view.feed(text[:text.index("Loading safetensors checkpoint shards: 100%")])
    assert view.line(30) == "engine [4/6] loading the weights: 0/1 shards (30s)"
    view.feed(text[text.index("Loading safetensors checkpoint shards: 100%"):
                   text.index("punica_selector")])
    assert view.line(31) == ("engine [5/6] sizing the KV cache and warming up: "
                             "weights loaded in 0.4 s (31s)")


def test_nothing_logged_yet_and_a_real_error() -> None:
    view = StartupView()
    assert view.line(2) == "engine [0/6] starting Python and importing vLLM (2s)"
    text = RECORDED.read_text()
    view.feed(text[:text.rindex("\n", 0, text.index("Initializing a V1")) + 1])
    view.feed("(EngineCore pid=7) ERROR 12-02 00:55:28 [core.py:99] EngineCore failed to "
              "start: ValueError: max_lora_rank (64) exceeds the supported ranks for this "
              "build of vLLM, pick one of 8, 16, 32\n")
    line = view.line(40)
    assert line.startswith("engine [2/6] reading the model's config (40s); last problem: "
                           "EngineCore failed to start: ValueError: max_lora_rank (64)")
    assert line.endswith("…")
    assert not line.endswith(" …")  # cut between words


def test_shorten_and_message() -> None:
    assert shorten("a  b\tc") == "a b c"
    assert shorten("alpha beta gamma delta", 12) == "alpha beta…"
    assert shorten("x" * 30, 10) == "x" * 9 + "…"
    assert message("(APIServer pid=1) INFO 12-02 00:57:28 [entry.py:140] Starting vLLM "
                   "server on http://127.0.0.1:1") == "Starting vLLM server on http://127.0.0.1:1"


def test_the_follower_reads_the_growing_file_and_speaks_on_change(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    said: list[str] = []
    follow = LogFollower(log, said.append, quiet=10)
    follow(0)  # no file yet
    lines = RECORDED.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:5]))
    follow(1)
    follow(2)  # nothing new: quiet
    follow(12)  # still nothing new, 10 s on: said again
    with log.open("a") as out:
        out.writelines(lines[5:])
    follow(13)
    assert said == ["engine [0/6] starting Python and importing vLLM (0s)",
                    "engine [1/6] starting vLLM 0.32.0 (1s)",
                    "engine [1/6] starting vLLM 0.32.0 (12s)",
                    "engine ready (13s)"]
