"""bench/auto_routing.py's JSON summary and bench/embedding_layers.py's table: the
figures of each cut of the embedding model, computed from the picks, not copied."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _auto_routing_report import HEAD, HEAD_EVERY, NEAREST, summary  # noqa: E402
from auto_routing import Timer  # noqa: E402
from embedding_layers import parse_args, table  # noqa: E402
from mol_router.auto.heads.train import Labelled, Report  # noqa: E402

ROWS = [Labelled("hi", "chat"), Labelled("fix it", "coding", borderline=True),
        Labelled("bonjour", "chat", lang="fr"), Labelled("book it", "agent", lang="de")]


def _timer(ms: list[float]) -> Timer:
    t = Timer()
    t.latency = [m / 1000 for m in ms]
    t.cpu = [0.001] * len(ms)
    return t


def _result() -> dict[str, object]:
    return {"rows": ROWS, "model": "all-minilm-l6-v2-first2", "judged": "halves",
            "cv": Report(folds=5, prompts=4, accuracy=0.75, accuracy_head=0.5,
                         keyword_share=0.0, keyword_accuracy=None,
                         keyword_head_accuracy=None, below_threshold=0.0),
            "cv_seeds": {"all-minilm-l6-v2-first2": [0.75, 0.7, 0.8]},  # mean 0.75
            "modes": {HEAD: {"picked": ["chat", "coding", "agent", "agent"],
                             "timer": _timer([10, 12, 14, 30])},
                      HEAD_EVERY: {"picked": ["chat", "ui", "chat", "agent"],
                                   "timer": _timer([9, 11, 13, 15])},
                      NEAREST: {"picked": ["chat", "coding", "chat", "chat"], "timer": None}}}


def test_the_summary_counts_each_group_from_the_picks() -> None:
    s = summary(_result())
    head = s["modes"][HEAD]
    assert head["accuracy"] == 0.75  # 3 of 4
    assert head["notEnglish"] == 0.5  # bonjour -> agent is wrong, book it -> agent right
    assert head["borderline"] == 1.0
    assert s["modes"][HEAD_EVERY]["borderline"] == 0.0
    assert s["modes"][NEAREST]["p50Ms"] is None
    assert 11.0 <= s["modes"][HEAD_EVERY]["p50Ms"] <= 13.0
    assert s["modes"][HEAD]["cpuMs"] == pytest.approx(1.0)
    assert (s["cv"], s["prompts"]) == (0.75, 4)
    assert s["cvSeeds"] == [0.75, 0.7, 0.8]


def test_the_layers_table_has_a_row_per_cut_and_marks_the_default() -> None:
    runs = {2: summary(_result()), 3: summary(_result())}
    lines = table(runs)
    assert len(lines) == 4
    assert lines[2].startswith("| 2 | 75.0% | 75.0% | 50.0% | 100.0% |")  # CV: mean of seeds
    assert lines[3].startswith("| 3 (the default) |")


def test_the_layers_flag_is_checked() -> None:
    assert parse_args(["--layers", "3,1,3"]).cuts == [1, 3]
    with pytest.raises(SystemExit):
        parse_args(["--layers", "0,7"])
    with pytest.raises(SystemExit):
        parse_args(["--layers", "three"])
