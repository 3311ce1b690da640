"""Eval reports: the names and limits every component checks the same way.

An eval report is one evaluation suite's results for one adapter version (metric
values, the dataset digest, the judge model, an optional free-form report). The
catalog stores them, ``mol catalog eval attach`` sends them, and a MoLDeployment's
canary gates name a suite and a metric of them; all three validate with these
patterns (full matches).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from mol_platform.contract.refs import DIGEST_PATTERN, RefError

# Suite names: lowercase letters, digits, '.', '_' and '-', starting and ending
# alphanumeric, at most 63 characters (e.g. ``humaneval``, ``mmlu-pro``, ``support.v2``).
SUITE_PATTERN = r"[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?"
# A suite's own version (``1``, ``2024.06``, ``v3-rc1``).
SUITE_VERSION_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"
# Metric names: a letter, then letters, digits, '_', '.', '@', '/' or '-' (``pass@1``,
# ``exact_match``, ``rouge-L``, ``judge/helpfulness``), at most 64 characters.
METRIC_PATTERN = r"[A-Za-z][A-Za-z0-9_.@/-]{0,63}"
MAX_METRICS = 64  # metric values in one report
MAX_REPORTS_PER_VERSION = 100  # (suite, suite version) pairs attached to one version
MAX_REPORT_BYTES = 1 << 20  # the free-form report, UTF-8 encoded
MAX_JUDGE_CHARS = 256
MAX_METRIC_MAGNITUDE = 1e15  # |value|: finite and small enough to compare as a delta

SUITE_RE = re.compile(SUITE_PATTERN)
SUITE_VERSION_RE = re.compile(SUITE_VERSION_PATTERN)
METRIC_RE = re.compile(METRIC_PATTERN)
DIGEST_RE = re.compile(DIGEST_PATTERN)
SUITE_RULE = ("use 1-63 lowercase letters, digits, '.', '_' or '-', starting and ending with "
              "a letter or digit")
SUITE_VERSION_RULE = "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
METRIC_RULE = ("use 1-64 letters, digits, '_', '.', '@', '/' or '-', starting with a letter")


def check_suite(value: str) -> str:
    if SUITE_RE.fullmatch(value) is None:
        raise RefError(f"invalid suite name {value[:80]!r}: {SUITE_RULE}")
    return value


def check_suite_version(value: str) -> str:
    if SUITE_VERSION_RE.fullmatch(value) is None:
        raise RefError(f"invalid suite version {value[:80]!r}: {SUITE_VERSION_RULE}")
    return value


def check_metric(value: str) -> str:
    if METRIC_RE.fullmatch(value) is None:
        raise RefError(f"invalid metric name {value[:80]!r}: {METRIC_RULE}")
    return value


def check_metric_value(name: str, value: object) -> float:
    """A metric's value: a number (not a bool), finite, at most MAX_METRIC_MAGNITUDE."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RefError(f"metric {name!r}: expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or abs(number) > MAX_METRIC_MAGNITUDE:
        raise RefError(f"metric {name!r}: {value!r} is not a finite number of magnitude at "
                       f"most {MAX_METRIC_MAGNITUDE:g}")
    return number


def check_metrics(metrics: Mapping[str, object]) -> dict[str, float]:
    """Checked metric values: 1 to MAX_METRICS names, each a full match, values finite."""
    if not 1 <= len(metrics) <= MAX_METRICS:
        raise RefError(f"a report has 1 to {MAX_METRICS} metrics, got {len(metrics)}")
    return {check_metric(k): check_metric_value(k, v) for k, v in metrics.items()}
