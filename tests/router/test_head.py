"""The trained router head: its file (canonical, validated), the fit (deterministic,
calibrated), the keywords it keeps (measured on the data), and the cross-validation
that reports it (nested: a head never sees the fold it is judged on)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mol_router.auto.heads import model as head_mod
from mol_router.auto.heads.holdout import overlaps, split_halves
from mol_router.auto.heads.model import Head, HeadError, check_for
from mol_router.auto.heads.train import (
    Labelled,
    cross_validate,
    data_digest,
    fit_head,
    load_labelled,
    measure_keywords,
    stratified_folds,
)

EXPERTS = ("agent", "chat", "coding")


def clustered(per: int, spread: float, seed: int = 0, dims: int = 16,
              labels: np.ndarray | None = None) -> tuple[np.ndarray, list[Labelled]]:
    """Unit vectors around one random centre per expert (``spread``: the noise)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(EXPERTS), dims))
    y = np.repeat(np.arange(len(EXPERTS)), per) if labels is None else labels
    x = centres[y] + spread * rng.normal(size=(len(y), dims))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rows = [Labelled(f"prompt {i}", EXPERTS[c], str(i)) for i, c in enumerate(y)]
    return x, rows


def test_a_separable_set_is_learnt_and_its_probabilities_are_calibrated() -> None:
    x, rows = clustered(40, spread=0.9)
    report = cross_validate(x, rows, "mini", default="chat", ngrams=None)
    assert report.accuracy_head > 0.85
    head, _ = fit_head(x, rows, "mini", ngrams=None)
    assert head.experts == EXPERTS
    # calibrated: on fresh points of the same clusters, the mean confidence is close to
    # the accuracy (a temperature fitted on out-of-fold logits, not on the training fit)
    fresh, fresh_rows = clustered(200, spread=0.9, seed=0)
    probs = np.stack([head.probabilities(v) for v in fresh[len(rows):]])
    truth = np.array([EXPERTS.index(r.expert) for r in fresh_rows[len(rows):]])
    accuracy = float((probs.argmax(axis=1) == truth).mean())
    assert abs(float(probs.max(axis=1).mean()) - accuracy) < 0.08


def test_cross_validation_never_sees_its_test_fold() -> None:
    """Random labels: a head fitted on all rows recalls most of them, but the nested
    cross-validation reports about chance (1/3), as it must."""
    x, _ = clustered(30, spread=3.0, seed=3, dims=64)
    labels = np.random.default_rng(3).integers(0, 3, size=len(x))
    rows = [Labelled(f"prompt {i}", EXPERTS[c]) for i, c in enumerate(labels)]
    head, _ = fit_head(x, rows, "mini", ngrams=None)
    recalled = np.mean([head.experts[int(np.argmax(head.probabilities(v)))] == r.expert
                        for v, r in zip(x, rows, strict=True)])
    report = cross_validate(x, rows, "mini", ngrams=None)
    assert recalled > 0.6
    assert report.accuracy_head < 0.5


def test_the_fit_is_deterministic_and_the_file_canonical(tmp_path: Path) -> None:
    x, rows = clustered(20, spread=0.8)
    a, _ = fit_head(x, rows, "mini", lineage={"source": "set.jsonl"}, ngrams=None)
    b, _ = fit_head(x, rows, "mini", lineage={"source": "set.jsonl"}, ngrams=None)
    assert a.dumps() == b.dumps()
    path = tmp_path / "head.json"
    path.write_bytes(a.dumps())
    back = head_mod.load(path)
    assert back.digest() == a.digest()
    assert back.training["dataDigest"] == data_digest(rows)
    assert back.training["source"] == "set.jsonl"
    np.testing.assert_allclose(back.probabilities(x[0]), a.probabilities(x[0]))


def test_below_the_threshold_it_does_not_decide() -> None:
    x, rows = clustered(20, spread=0.8)
    head, _ = fit_head(x, rows, "mini", threshold=0.5, ngrams=None)
    # a turn the head cannot tell apart: its logits all equal (orthogonal to every row)
    flat = Head(head.experts, np.zeros_like(head.weights), np.zeros(3), 1.0, 0.5, "mini")
    verdict = flat.verdict(x[0])
    assert verdict.score == pytest.approx(1 / 3)
    assert verdict.expert is None
    assert verdict.reason == "below-confidence"
    assert verdict.score == pytest.approx(max(s.score for s in verdict.scores))
    sure = head.with_threshold(0.0).verdict(x[0])
    assert (sure.expert, sure.signal) == (rows[0].expert, "head")
    assert sure.margin == pytest.approx(sure.scores[0].score - sure.scores[1].score)


def test_keywords_are_kept_only_where_the_data_shows_them_unambiguous() -> None:
    texts = ["fix my python loop", "python typing question", "book a python course",
             "design a wireframe", "another wireframe please", "a regex question"]
    labels = ["coding", "coding", "agent", "ui", "ui", "coding"]
    kept, dropped = measure_keywords(
        {"coding": ["python", "regex", "docker"], "ui": ["wireframe"]}, texts, labels)
    assert kept == {"ui": ("wireframe",)}
    assert "1 of 3" in dropped["python"]  # the agent's prompt holds it too
    assert "fewer than 2" in dropped["regex"]  # once only: not evidence enough
    assert "in 0 prompt" in dropped["docker"]


def test_folds_are_stratified() -> None:
    y = np.array([0] * 10 + [1] * 25)
    fold = stratified_folds(y, 5)
    for f in range(5):
        assert (y[fold == f] == 0).sum() == 2
        assert (y[fold == f] == 1).sum() == 5


def test_labelled_files_read_text_or_prompt_and_refuse_bad_lines(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"text": "hello there", "expert": "chat"}\n\n'
                    '{"id": "c1", "prompt": "fix it", "expert": "coding", "lang": "non-en",'
                    ' "borderline": true}\n'
                    '{"text": "bonjour", "expert": "chat", "lang": "fr"}\n')
    rows = load_labelled(good)
    assert [(r.text, r.expert, r.lang, r.borderline) for r in rows] == [
        ("hello there", "chat", "en", False), ("fix it", "coding", "other", True),
        ("bonjour", "chat", "fr", False)]
    for line, error in [('{"text": "x", "expert": "Not A Name"}', "expert must be"),
                        ('{"expert": "chat"}', r"text \(or prompt\)"),
                        ('{"text": "x", "expert": "chat", "lang": "French!"}', "lang must"),
                        ("[1, 2]", "JSON object"), ("{nope", "not JSON")]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"text": "fine", "expert": "chat"}\n' + line + "\n")
        with pytest.raises(ValueError, match=f"bad.jsonl:2: .*{error}"):
            load_labelled(bad)


def test_too_few_prompts_per_expert_is_refused() -> None:
    x, rows = clustered(4, spread=0.5)
    with pytest.raises(ValueError, match="at least 5 labelled prompts"):
        fit_head(x, rows, "mini", ngrams=None)


def _doc() -> dict[str, object]:
    x, rows = clustered(10, spread=0.5, dims=4)
    head, _ = fit_head(x, rows, "mini", keywords={"coding": []}, ngrams=None)
    doc: dict[str, object] = json.loads(head.dumps())
    return doc


@pytest.mark.parametrize(("change", "error"), [
    ({"kind": "something/else"}, "not a router head"),
    ({"experts": ["agent", "chat", "Coding"]}, "not a DNS label"),
    ({"experts": ["agent", "chat", "chat"]}, "unique"),
    ({"bias": [0.0, 0.0]}, "bias must be 3 finite numbers"),
    ({"threshold": 1.5}, "threshold must be a number from 0 to 1"),
    ({"temperature": 0.0}, "temperature"),
    ({"embedding": {"model": "mini", "dims": 5}}, "weights row 0 must hold 5 numbers"),
    ({"embedding": {"model": "mini", "dims": 4.0}}, "embedding.dims must be an integer"),
    ({"weights": [[1e400, 0, 0, 0]] * 3}, "contains Infinity"),
    ({"keywords": {"legal": ["law"]}}, "keywords must map experts of the head"),
    ({"keywords": {"chat": ["x"]}}, "keywords of 'chat': at most 256, each 2 to 80"),
    ({"keywords": {"chat": [f"w{i}" for i in range(257)]}}, "at most 256"),
    ({"weights": "none"}, "weights must be 3 rows"),
    ({"weights": [[0.0]] * 3, "embedding": {"model": "mini", "dims": 1}}, None),
])
def test_a_malformed_head_is_refused(change: dict[str, object], error: str | None) -> None:
    doc = {**_doc(), **change}
    if error is None:  # the one well-formed change: a head of one dimension
        assert head_mod.loads(json.dumps(doc)).dims == 1
        return
    with pytest.raises(HeadError, match=error):
        head_mod.loads(json.dumps(doc))


def test_a_head_for_other_experts_or_another_model_is_refused() -> None:
    head = head_mod.parse(_doc())
    check_for(head, ["agent", "chat", "coding", "ui"], "mini")
    with pytest.raises(HeadError, match="experts the deployment lacks: agent"):
        check_for(head, ["chat", "coding"], "mini")
    with pytest.raises(HeadError, match="trained on embedding model 'mini'"):
        check_for(head, list(EXPERTS), "all-minilm-l6-v2")
    with pytest.raises(HeadError, match="not JSON"):
        head_mod.loads(b"\xff")
    assert isinstance(head, Head)


def test_keywords_first_is_dropped_when_out_of_fold_it_routes_worse_than_the_head() -> None:
    """'regex' is unambiguous on all the data, but the rule that kept it also keeps
    'python' on the fold holding the agent's python prompt and sends it to coding: out of
    fold the keyword stage is wrong where the head is right, so the head gets none."""
    x, rows = clustered(20, spread=0.3)
    texts = []
    for i, r in enumerate(rows):
        extra = ""
        if r.expert == "coding":
            extra = " regex" if i % 4 == 0 else " python" if i % 4 == 1 else ""
        elif r.expert == "agent" and i == 0:
            extra = " python"
        texts.append(Labelled(r.text + extra, r.expert))
    candidates = {"coding": ["regex", "python"]}
    head, dropped = fit_head(x, texts, "mini", keywords=candidates, ngrams=None)
    gate = head.training["keywordsOutOfFold"]
    assert gate["right"] < gate["headRight"]
    assert head.keywords == {}
    assert "out of fold" in dropped["regex"]
    forced, _ = fit_head(x, texts, "mini", keywords=candidates, keywords_gate=False,
                         ngrams=None)
    assert forced.keywords == {"coding": ("regex",)}


def test_character_ngrams_carry_what_the_embedding_misses() -> None:
    """Every prompt gets the same embedding; only the words tell the experts apart. The
    head with n-grams learns them (out of fold), the one without is at chance."""
    words = {"agent": ["booking", "reserve", "ticket"], "chat": ["weather", "joke", "story"],
             "coding": ["regex", "compile", "segfault"]}
    rows = [Labelled(f"please {words[e][i % 3]} now {i}", e)
            for e in EXPERTS for i in range(12)]
    same = np.tile(np.eye(8)[0], (len(rows), 1))
    with_ngrams = cross_validate(same, rows, "mini", folds=3)
    without = cross_validate(same, rows, "mini", folds=3, ngrams=None)
    assert with_ngrams.accuracy_head > 0.9
    assert without.accuracy_head < 0.5
    ng = head_mod.Ngrams(3, 64)
    np.testing.assert_array_equal(ng.vector("Regex  HELP"), ng.vector("regex help"))
    assert float(np.linalg.norm(ng.vector("regex"))) == pytest.approx(1.0)
    assert not ng.vector("").any()


def test_overlaps_finds_repeated_and_near_duplicate_prompts() -> None:
    train = [Labelled("Fix my  SQL query", "coding"), Labelled("plan a trip", "agent")]
    test = [Labelled("fix my sql QUERY", "coding"), Labelled("plan a journey", "agent"),
            Labelled("draw a chart", "ui")]
    tv = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    xv = np.array([[0.0, 0.0, 1.0], [0.0, 0.95, 0.312], [0.6, 0.0, 0.8]])
    xv /= np.linalg.norm(xv, axis=1, keepdims=True)
    found = overlaps(train, tv, test, xv, near=0.9)
    assert [(t, j) for t, j, _ in found] == [(0, 0), (1, 1)]
    assert found[0][2] == 1.0, "the same text, case and spacing folded"
    assert overlaps(train, tv, test[2:], xv[2:], near=0.9) == []


def test_split_halves_are_disjoint_and_hold_half_of_every_expert() -> None:
    _, rows = clustered(10, 0.1)
    a, b = split_halves(rows)
    assert not set(a) & set(b)
    assert sorted(a + b) == list(range(len(rows)))
    for expert in EXPERTS:
        assert sum(rows[i].expert == expert for i in a) == 5
    assert split_halves(rows) == (a, b), "seeded"
