"""Labelled prompts: what ``mol router train`` and the benchmark learn from (pure but for
reading the file).

One row is a prompt and the expert that should take it; the file is JSON lines, the
format ``mol router labels export`` writes. :func:`data_digest` names the data a head
learned from in its lineage, whatever file held it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mol_router.auto.heads.model import EXPERT_RE

MAX_PROMPTS = 200_000
MAX_TEXT = 100_000
_LANG_RE = re.compile(r"[a-z]{2,3}(-[a-z0-9]{2,8})*")


@dataclass(frozen=True, slots=True)
class Labelled:
    """One labelled prompt: ``text``, the right ``expert``, and for the benchmark's
    breakdowns its language (``en`` unless told) and whether it is ``borderline``."""

    text: str
    expert: str
    id: str = ""
    lang: str = "en"
    borderline: bool = False


def load_labelled(path: str | Path) -> list[Labelled]:
    """JSON lines ``{"text", "expert"}`` (``prompt`` is read as ``text``; ``id``,
    ``lang`` and ``borderline`` are optional). A bad line is a ValueError naming it."""
    out: list[Labelled] = []
    text = Path(path).read_text(encoding="utf-8")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: each line is a JSON object")
        body = row.get("text", row.get("prompt"))
        expert = row.get("expert")
        if not isinstance(body, str) or not body.strip() or len(body) > MAX_TEXT:
            raise ValueError(f"{where}: text (or prompt) must be 1 to {MAX_TEXT} characters")
        if not isinstance(expert, str) or not EXPERT_RE.fullmatch(expert):
            raise ValueError(f"{where}: expert must be an expert's name (a DNS label)")
        lang = row.get("lang") or "en"
        if lang == "non-en":  # the project's set marks other languages this way
            lang = "other"
        if not isinstance(lang, str) or not (lang == "other" or _LANG_RE.fullmatch(lang)):
            raise ValueError(f"{where}: lang must be a language code such as fr or pt-br")
        out.append(Labelled(body, expert, str(row.get("id", n)), lang,
                            bool(row.get("borderline"))))
        if len(out) > MAX_PROMPTS:
            raise ValueError(f"{path}: more than {MAX_PROMPTS} prompts")
    return out


def data_digest(rows: Sequence[Labelled]) -> str:
    """The labelled data's identity: sha256 over its (text, expert) pairs in order, as
    JSON lines. The head's lineage names the data it learned from, whatever file held
    it."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps([r.text, r.expert], ensure_ascii=False).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def normalised(text: str) -> str:
    """Case and spacing folded: what "the same text" means for overlap checks."""
    return " ".join(text.casefold().split())
