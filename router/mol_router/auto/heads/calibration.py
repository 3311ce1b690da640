"""Calibrating the router head's probabilities, and measuring how well they are (numpy).

The head's temperature ``T`` divides its logits before the softmax, so that a turn it
gives probability 0.9 is right about 9 times in 10 and the confidence ``threshold``
means what it says. ``T`` is fitted on out-of-fold logits (each prompt scored by a head
that did not see it), by the log-loss.

Why the log-loss alone is not enough: on a small file most out-of-fold picks are
right, and when they all are, the log-loss keeps falling as ``T`` shrinks: the fit
sharpened the head to the grid's floor (logits times 20), and a head of 20 prompts with
85% nested cross-validation answered 1.000 on prompts it had never seen, so its
threshold never fired. After ``n`` held-out prompts all right, the rate of right
answers the data supports is Laplace's ``(n + 1) / (n + 2)``, not 1: the temperature
is raised until the mean top probability is within it (:func:`fit_temperature`), a
bound that changes nothing where the log-loss already calibrates and fades as the file
grows.

:func:`calibration_error` is the expected calibration error (ECE) that ``mol router
train`` reports from its nested cross-validation: the gap between confidence and
accuracy, averaged over confidence bins weighted by their turns.
"""

from __future__ import annotations

import math

import numpy as np

from mol_router.auto import scores

GRID = np.exp(np.linspace(math.log(0.05), math.log(20.0), 121))
"""The temperatures tried: 0.05..20, log-spaced (the loss is smooth and one-dimensional)."""
BINS = 10


def nll(z: scores.Vector, y: np.ndarray, temperature: float) -> float:
    """The mean log-loss of logits ``z`` at ``temperature`` against the labels ``y``."""
    a = z / temperature
    a = a - a.max(axis=1, keepdims=True)
    return float(-(a[np.arange(len(y)), y] - np.log(np.exp(a).sum(axis=1))).mean())


def confidence(z: scores.Vector, temperature: float) -> float:
    """The mean top probability of logits ``z`` at ``temperature``."""
    a = z / temperature
    a = np.exp(a - a.max(axis=1, keepdims=True))
    return float((1.0 / a.sum(axis=1)).mean())


def supported(right: int, n: int) -> float:
    """The rate of right answers ``right`` of ``n`` held-out prompts supports at most:
    Laplace's rule of succession, ``(right + 1) / (n + 2)`` (21 of 22 after 20 right)."""
    return (right + 1) / (n + 2)


def fit_temperature(z: scores.Vector, y: np.ndarray) -> float:
    """The temperature that minimises the log-loss of held-out logits ``z``, raised
    where needed so that their mean top probability stays within what their accuracy
    supports (:func:`supported`): on a small file whose held-out picks are all right
    the log-loss alone sharpens without end."""
    losses = [nll(z, y, float(t)) for t in GRID]
    at = int(np.argmin(losses))
    cap = supported(int((z.argmax(axis=1) == y).sum()), len(y))
    while at < len(GRID) - 1 and confidence(z, float(GRID[at])) > cap:
        at += 1
    return float(GRID[at])


def calibration_error(confidence: scores.Vector, right: np.ndarray,
                      bins: int = BINS) -> float:
    """The expected calibration error: over ``bins`` equal-width bins of the top
    probability, ``|accuracy - mean confidence|`` weighted by the bin's share of turns."""
    if not len(confidence):
        return 0.0
    edges = np.minimum((np.asarray(confidence) * bins).astype(int), bins - 1)
    out = 0.0
    for b in np.unique(edges):
        inside = edges == b
        out += float(inside.mean()) * abs(float(np.mean(right[inside]))
                                           - float(np.mean(confidence[inside])))
    return out
