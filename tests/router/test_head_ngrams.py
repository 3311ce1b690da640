"""The head's character n-gram features with several gram lengths (``ngrams.also``):
each length its own block, the file round trip, old files unchanged byte for byte, bad
blocks refused with a clear error; the penalty chosen by out-of-fold log-loss; and the
fit in the rows' span, which reaches the weights the plain descent does."""

from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pytest

from mol_router.auto.heads.calibration import nll as _nll
from mol_router.auto.heads.model import Head, HeadError, Ngrams, loads
from mol_router.auto.heads.train import (
    DEFAULT_NGRAMS,
    L2_GRID,
    _descend_primal,
    choose_l2,
    fit_softmax,
    out_of_fold,
)


def counts(text: str, n: int, dims: int) -> np.ndarray:
    """The n-gram counts computed here, independently of the module."""
    padded = " " + " ".join("".join(c if c.isalnum() or c == "_" else " " for c in
                                    text.lower()).split()) + " "
    out = np.zeros(dims)
    for i in range(len(padded) - n + 1):
        out[zlib.crc32(padded[i:i + n].encode()) % dims] += 1
    return out


def head_with(ngrams: Ngrams | None, dims: int = 4) -> Head:
    width = dims + (ngrams.width if ngrams else 0)
    rng = np.random.default_rng(1)
    return Head(("chat", "coding"), rng.normal(size=(2, width)), np.array([0.1, -0.1]),
                1.5, 0.4, "mini", {}, {"prompts": 2}, ngrams)


def test_each_gram_length_is_a_block_of_its_own_scaled_to_unit_times_scale() -> None:
    ng = Ngrams(3, 64, 0.5, (4, 2))
    text = "Écris une función: parse CSV!"
    v = ng.vector(text)
    assert v.shape == (192,)
    assert ng.width == 192
    assert ng.lengths == (3, 4, 2)
    for block, n in zip(np.split(v, 3), (3, 4, 2), strict=True):
        want = counts(text, n, 64)
        np.testing.assert_allclose(block, 0.5 * want / np.linalg.norm(want))
    np.testing.assert_array_equal(Ngrams(3, 64, 0.5).vector(text), v[:64])
    assert ng.matrix([]).shape == (0, 192)
    assert not Ngrams(3, 64, 0.5, (4,)).vector("").any(), "no gram: no counts, no NaN"


def test_the_default_recipe_gives_the_character_part_unit_weight() -> None:
    assert DEFAULT_NGRAMS.lengths == (3, 4)
    v = DEFAULT_NGRAMS.vector("Write a regex that matches dates")
    assert float(np.linalg.norm(v)) == pytest.approx(1.0)
    assert DEFAULT_NGRAMS.scale == pytest.approx(math.sqrt(0.5))


def test_a_head_with_several_lengths_round_trips_through_its_file() -> None:
    head = head_with(Ngrams(3, 32, 0.7, (4,)))
    data = json.loads(head.dumps())
    assert data["ngrams"] == {"n": 3, "dims": 32, "scale": 0.7, "also": [4]}
    back = loads(head.dumps())
    assert back.ngrams == head.ngrams
    assert back.dims == 4
    assert back.dumps() == head.dumps()
    query = np.ones(4) / 2.0
    np.testing.assert_allclose(back.probabilities(query, "fix my SQL"),
                               head.probabilities(query, "fix my SQL"))


def test_a_file_from_before_also_loads_and_keeps_its_bytes() -> None:
    head = head_with(Ngrams(3, 16, 1.0))
    data = json.loads(head.dumps())
    assert "also" not in data["ngrams"], "a one-length head is written as before"
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    back = loads(raw)
    assert back.ngrams == Ngrams(3, 16, 1.0, ())
    assert back.dumps() == raw, "the same bytes, so the same digest in the catalog"


@pytest.mark.parametrize(("also", "message"), [
    ([3], r"ngrams\.also must be a list of further gram lengths from 2 to 6, none "
          r"repeated and none equal to ngrams\.n"),
    ([4, 4], r"none repeated"),
    ([7], r"from 2 to 6"),
    (["4"], r"ngrams\.also must be a list of further gram lengths"),
    ([True], r"ngrams\.also must be a list of further gram lengths"),
    (4, r"ngrams\.also must be a list of further gram lengths"),
])
def test_a_bad_also_is_refused_with_what_is_wrong(also: object, message: str) -> None:
    data = json.loads(head_with(Ngrams(3, 16, 1.0, (4,))).dumps())
    data["ngrams"]["also"] = also
    with pytest.raises(HeadError, match=message):
        loads(json.dumps(data))


def test_bad_ngrams_blocks_are_refused() -> None:
    data = json.loads(head_with(Ngrams(3, 16, 1.0)).dumps())
    data["ngrams"] = [3, 16]
    with pytest.raises(HeadError, match="ngrams must be an object"):
        loads(json.dumps(data))
    data["ngrams"] = {"n": 3, "dims": 1 << 15, "scale": 1.0, "also": [4, 5]}
    with pytest.raises(HeadError, match="dims times the gram lengths must be at most 65536"):
        loads(json.dumps(data))
    data = json.loads(head_with(Ngrams(3, 16, 1.0, (4,))).dumps())
    data["ngrams"] = {"n": 3, "dims": 16, "scale": 1.0}  # the weights hold two blocks
    with pytest.raises(HeadError, match=r"weights row 0 must hold 20 numbers \(4 for the "
                       r"embedding and 16 for the n-grams\), it holds 36"):
        loads(json.dumps(data))


def test_the_penalty_is_the_one_with_the_lowest_out_of_fold_log_loss() -> None:
    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(3), 20)
    x = rng.normal(size=(3, 12))[y] + 1.5 * rng.normal(size=(60, 12))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    losses = {l2: _nll(out_of_fold(x, y, 3, l2, 4, 0), y, 1.0) for l2 in L2_GRID}
    accs = {l2: float((out_of_fold(x, y, 3, l2, 4, 0).argmax(axis=1) == y).mean())
            for l2 in L2_GRID}
    l2, z = choose_l2(x, y, 3, 4, 0)
    assert l2 == min(losses, key=lambda k: losses[k])
    np.testing.assert_allclose(z, out_of_fold(x, y, 3, l2, 4, 0))
    # the data is noisy enough that the two criteria disagree: the pick follows the loss
    assert max(accs, key=lambda k: (accs[k], -losses[k])) != l2


def test_the_fit_in_the_rows_span_takes_the_same_steps_as_the_fit_on_the_weights() -> None:
    """Fewer rows than inputs: the descent runs on the rows' Gram matrix; its weights
    are the ones the descent on the weights themselves reaches."""
    rng = np.random.default_rng(5)
    y = np.repeat(np.arange(3), 10)
    x = rng.normal(size=(3, 200))[y] + rng.normal(size=(30, 200))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for l2 in (1e-3, 1e-2):
        w, b = fit_softmax(x, y, 3, l2, iters=150)
        w0, b0 = _descend_primal(x, y, 3, l2, 150)
        assert w.shape == (3, 200)
        np.testing.assert_allclose(w, w0, atol=1e-9)
        np.testing.assert_allclose(b, b0, atol=1e-9)
    assert float(np.abs(w).max()) > 0.01, "the fit moved off zero"
