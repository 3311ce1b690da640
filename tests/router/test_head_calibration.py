"""The trained head on small files: the folds nested cross-validation really needs
(scaled down, and said so), probabilities that do not claim certainty a few prompts
cannot show, and the calibration error the training report gives."""

from __future__ import annotations

import numpy as np
import pytest

from mol_router.auto.heads.calibration import (
    GRID,
    calibration_error,
    confidence,
    fit_temperature,
    nll,
    supported,
)
from mol_router.auto.heads.train import cross_validate, fit_head, min_prompts
from mol_router.auto.training import report_text, train
from tests.router.test_head import EXPERTS, clustered


def test_nested_cross_validation_names_its_real_minimum() -> None:
    assert [min_prompts(k) for k in (2, 3, 4, 5, 10)] == [4, 5, 6, 7, 12]
    x, rows = clustered(6, spread=0.5)
    with pytest.raises(ValueError, match=r"nested 5-fold cross-validation needs at least 7 "
                       r"labelled prompts per expert .*; agent has 6: add prompts, or pass "
                       r"--folds 4"):
        cross_validate(x, rows, "mini", ngrams=None)
    x, rows = clustered(3, spread=0.5)
    with pytest.raises(ValueError, match=r"every expert needs at least 4 labelled prompts "
                       r"\(nested cross-validation with 2 folds\); agent has 3"):
        train(rows, x, "mini", ngrams=None)


@pytest.mark.parametrize(("per", "folds"), [(5, 3), (6, 4), (7, 5)])
def test_a_small_file_is_trained_with_the_folds_it_can_fill_and_says_so(
        per: int, folds: int) -> None:
    x, rows = clustered(per, spread=0.5)
    trained = train(rows, x, "mini", ngrams=None)
    assert trained.report.folds == folds
    text = report_text(trained, None)
    cv = trained.head.training["crossValidation"]
    if folds == 5:
        assert trained.report.folds_asked == 0
        assert "foldsAsked" not in cv
        assert "not 5" not in text
    else:
        assert trained.report.folds_asked == 5
        assert cv["foldsAsked"] == 5
        assert text.startswith(f"folds: {folds}, not 5: nested 5-fold cross-validation "
                               "needs 7 labelled prompts per expert")
        assert f"{folds}-fold cross-validation on {3 * per} prompts" in text


def test_a_head_of_a_few_prompts_is_not_certain_of_prompts_it_never_saw() -> None:
    """15 prompts, every held-out pick right: the log-loss alone sharpened the head to
    the grid's floor (temperature 0.05) and it said 0.997 on fresh prompts of which it
    got 2% wrong. The temperature now stops where the held-out accuracy can vouch."""
    x, rows = clustered(5, spread=0.9)
    head, _ = fit_head(x, rows, "mini", ngrams=None, folds=3)
    assert head.temperature > 10 * GRID[0]
    fresh, fresh_rows = clustered(100, spread=0.9, seed=0)
    probs = np.stack([head.probabilities(v) for v in fresh[len(rows):]])
    truth = np.array([EXPERTS.index(r.expert) for r in fresh_rows[len(rows):]])
    accuracy = float((probs.argmax(axis=1) == truth).mean())
    assert float(probs.max(axis=1).mean()) < 0.97
    assert abs(float(probs.max(axis=1).mean()) - accuracy) < 0.06


def test_the_temperature_bound_only_acts_where_the_log_loss_runs_away() -> None:
    y = np.repeat(np.arange(3), 7)
    sure = 10.0 * np.eye(3)[y]  # every held-out pick right, by a wide margin
    t = fit_temperature(sure, y)
    assert t > GRID[0]
    assert confidence(sure, t) <= supported(21, 21) == 22 / 23
    assert confidence(sure, float(GRID[list(GRID).index(t) - 1])) > 22 / 23, "the least"
    rng = np.random.default_rng(1)
    noisy = 3.0 * np.eye(3)[y] + rng.normal(scale=2.0, size=(21, 3))  # a few wrong
    losses = [nll(noisy, y, float(g)) for g in GRID]
    assert fit_temperature(noisy, y) == float(GRID[int(np.argmin(losses))])


def test_the_report_gives_the_calibration_error() -> None:
    assert calibration_error(np.array([0.9, 0.9, 0.6, 0.6]),
                             np.array([True, False, True, True])) == pytest.approx(
        0.5 * 0.4 + 0.5 * 0.4)
    x, rows = clustered(12, spread=1.2)
    trained = train(rows, x, "mini", ngrams=None)
    cv = trained.head.training["crossValidation"]
    r = trained.report
    assert cv["calibrationError"] == round(r.calibration_error, 4)
    assert cv["meanConfidence"] == round(r.confidence, 4)
    assert 0.0 < r.calibration_error < 0.5
    assert 1 / 3 < r.confidence < 1.0
    assert "calibration error (ECE, the head alone): " in report_text(trained, None)
