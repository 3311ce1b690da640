"""Patch and selector semantics of the Kubernetes API, for the emulator.

Merge patch (RFC 7386, also used for strategic-merge and apply patches, which the
emulator does not distinguish), JSON patch (RFC 6902) and label/field selectors.
"""

from __future__ import annotations

import copy
import re
from typing import Any


class PatchError(ValueError):
    """A patch that cannot apply; ``status`` is the HTTP code the API server answers."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: dicts merge recursively, ``None`` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"bad JSON pointer {path!r}", 400)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise PatchError(f"path {path!r} does not exist")
    return doc


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
        if not 0 <= index <= len(parent):
            raise PatchError(f"bad list index in {path!r}")
        parent.insert(index, copy.deepcopy(value))
    else:
        raise PatchError(f"cannot add at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return doc, parent.pop(int(last))
    raise PatchError(f"path {path!r} does not exist")


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 on a copy of ``doc``; a failed ``test`` raises PatchError (422)."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations", 400)
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"bad JSON patch operation {op!r}", 400)
        kind, path = op["op"], op["path"]
        if kind == "test":
            if _walk(doc, _pointer(path), path) != op.get("value"):
                raise PatchError(f"test operation failed at {path!r}")
        elif kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            doc, _ = _remove(doc, path)
            doc = _add(doc, path, op.get("value"))
        elif kind in ("move", "copy"):
            value = _walk(doc, _pointer(op.get("from", "")), op.get("from", ""))
            if kind == "move":
                doc, value = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        else:
            raise PatchError(f"unknown JSON patch op {kind!r}", 400)
    return doc


_SPLIT = re.compile(r",(?![^()]*\))")
_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def match_labels(labels: dict[str, str], selector: str) -> bool:
    """Equality (``a=b``, ``a==b``, ``a!=b``), set (``a in (x,y)``, ``a notin (x)``) and
    existence (``a``, ``!a``) requirements, comma-separated (all must hold)."""
    for req in filter(None, (r.strip() for r in _SPLIT.split(selector))):
        m = _SET.match(req)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            ok = (labels.get(key) in values) if op == "in" else (labels.get(key) not in values)
        elif "!=" in req:
            key, value = (s.strip() for s in req.split("!=", 1))
            ok = labels.get(key) != value
        elif "=" in req:
            key, value = (s.strip() for s in req.replace("==", "=").split("=", 1))
            ok = labels.get(key) == value
        elif req.startswith("!"):
            ok = req[1:].strip() not in labels
        else:
            ok = req in labels
        if not ok:
            return False
    return True


def match_fields(obj: dict[str, Any], selector: str) -> bool:
    """Field selectors on dotted paths (``metadata.name=x``, ``status.phase!=Running``)."""
    for req in filter(None, (r.strip() for r in selector.split(","))):
        negate = "!=" in req
        path, value = (s.strip() for s in req.replace("==", "=").replace("!=", "=").split("=", 1))
        current: Any = obj
        for part in path.split("."):
            current = current.get(part) if isinstance(current, dict) else None
        if (str(current) if current is not None else "") == value and negate:
            return False
        if (str(current) if current is not None else "") != value and not negate:
            return False
    return True
