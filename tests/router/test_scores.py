"""The semantic signal's decision as a pure function of given embeddings."""

from __future__ import annotations

import pytest

from mol_router.auto import scores


def _index() -> list[scores.ExpertIndex]:
    return [
        scores.expert_index("coding", [[1.0, 0.0, 0.0], [0.8, 0.6, 0.0]],
                             ["python", "stack trace"]),
        scores.expert_index("ui", [[0.0, 1.0, 0.0]], ["css"]),
        scores.expert_index("chat", [[0.0, 0.0, 1.0]], []),
    ]


def test_nearest_and_centroid_mix_and_rank() -> None:
    ranked = scores.scores(_index(), "hello", scores.unit([1.0, 0.1, 0.0]))
    assert [s.expert for s in ranked] == ["coding", "ui", "chat"]
    best = ranked[0]
    assert best.nearest == pytest.approx(0.995, abs=1e-3)
    assert 0.9 < best.centroid < best.nearest  # the centroid lies between the examples
    assert best.score == pytest.approx(0.5 * best.nearest + 0.5 * best.centroid)
    verdict = scores.decide(ranked, 0.5, 0.1, embedded=True)
    assert (verdict.expert, verdict.signal) == ("coding", "semantic")
    assert verdict.margin == pytest.approx(best.score - ranked[1].score)


def test_threshold_and_margin_leave_it_undecided() -> None:
    query = scores.unit([1.0, 1.0, 0.0])  # halfway between coding and ui
    ranked = scores.scores(_index(), "", query)
    assert scores.decide(ranked, 0.99, 0.0, embedded=True).reason == "below-threshold"
    undecided = scores.decide(ranked, 0.1, 0.5, embedded=True)
    assert (undecided.expert, undecided.reason) == (None, "below-margin")


def test_keywords_are_whole_words_case_insensitive_and_capped() -> None:
    pattern = scores.keyword_pattern(["Python", "stack trace", "py"])
    assert scores.keyword_hits(pattern, "My PYTHON script prints a Stack Trace") == 2
    assert scores.keyword_hits(pattern, "pythonic happy") == 0
    assert scores.keyword_hits(pattern, "py py python stack trace") == scores.MAX_KEYWORD_HITS
    assert scores.keyword_pattern([" ", ""]) is None


def test_keywords_lift_a_close_call() -> None:
    query = scores.unit([0.6, 1.0, 0.0])  # a little closer to ui
    plain = scores.scores(_index(), "make it look nice", query)
    assert plain[0].expert == "ui"
    lifted = scores.scores(_index(), "the python code looks off", query)
    assert lifted[0].expert == "coding"
    assert lifted[0].keywords == 1


def test_without_embedding_only_a_keyword_lead_decides() -> None:
    ranked = scores.scores(_index(), "a python stack trace", None)
    verdict = scores.decide(ranked, 0.9, 0.9, embedded=False)
    assert (verdict.expert, verdict.signal) == ("coding", "keywords")
    tie = scores.scores(_index(), "python css", None)
    assert scores.decide(tie, 0.0, 0.0, embedded=False).expert is None
    assert scores.decide(scores.scores(_index(), "hi", None), 0, 0, embedded=False).expert is None


def test_bad_vectors_are_refused() -> None:
    with pytest.raises(ValueError, match="non-zero"):
        scores.unit([0.0, 0.0])
    with pytest.raises(ValueError, match="different sizes"):
        scores.expert_index("x", [[1.0, 0.0], [1.0]], [])
    assert scores.decide((), 0.0, 0.0, embedded=True).expert is None


def test_keywords_of_one_expert_alone_settle_the_turn() -> None:
    index = _index()
    settled = scores.keyword_verdict(index, "my Python code")
    assert settled is not None
    assert (settled.expert, settled.signal, settled.score) == ("coding", "keywords", 0.1)
    assert settled.margin == pytest.approx(0.1)
    # keywords of two experts, or none: the embedding has to decide
    assert scores.keyword_verdict(index, "python and css") is None
    assert scores.keyword_verdict(index, "hello there") is None
    assert scores.keyword_verdict([], "python") is None
