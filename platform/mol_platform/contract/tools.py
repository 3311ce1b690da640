"""Tools proposed from a sandbox session: the document the catalog stores, the automatic
checks shown beside a proposal, and the check a loader runs before each load.

A tool is one Python function (its source, name, description and JSON-schema
parameters). The catalog stores its canonical JSON document (``KIND``), named by the
sha256 of those bytes; a person approves a version by moving the protected ``approved``
alias. ``checks`` are advice for that person, never a gate: a proposal whose source
does not parse is still stored and shown, so the reviewer sees what the session wrote.
``verify_load`` is what a router or sandbox runs on the bytes it is about to load: the
bytes must hash to the approved digest, and a signature, when there is one (or one is
required), must cover exactly those bytes. Pure: no I/O.
"""

from __future__ import annotations

import ast
import hashlib
import json
import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mol_platform.contract import model_signature as ms

KIND = "mol.tool/v1"
EVENT_PREFIX = "tool."
APPROVED = "approved"  # the one alias a tool has; moving it is the approval
DOCUMENT_FILE = "tool.json"  # the document's file name in a model-signing signature
NAME_PATTERN = r"[a-z_][a-z0-9_]{0,62}"  # a lowercase Python identifier
# The whole rule, keywords refused, for schemas that document it (OpenAPI).
EXACT_NAME_PATTERN = (f"(?!(?:{'|'.join(k for k in keyword.kwlist if k.islower())})$)"
                      f"{NAME_PATTERN}")
LINEAGE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}"
MAX_SOURCE_CHARS = 64 << 10
MAX_DESCRIPTION_CHARS = 4000
MAX_SCHEMA_BYTES = 64 << 10
MAX_BODY_BYTES = 256 << 10  # the largest publish body the catalog reads
MAX_SCHEMA_DEPTH = 16
JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_NAME = re.compile(NAME_PATTERN)
_LINEAGE = re.compile(LINEAGE_PATTERN)
NOT_RUN = ("not run: running the tool's example needs the sandbox service, and this "
           "catalog has none (MOL_CATALOG_SANDBOX_URL is unset)")
EXAMPLE_CHECK = "example_runs"


class ToolError(ValueError):
    """A tool name, lineage value or document that breaks a rule (the message says which)."""


def check_tool_name(value: str) -> str:
    """A tool name: a lowercase Python identifier that is no keyword (the function's
    name, so the model calls the tool by it), at most 63 characters."""
    if not isinstance(value, str) or _NAME.fullmatch(value) is None or keyword.iskeyword(value):
        raise ToolError(f"invalid tool name {value!r}: use a lowercase Python identifier "
                        "(letters, digits, '_'; not starting with a digit; no keyword), "
                        "at most 63 characters")
    return value


def check_lineage_value(value: str, what: str) -> str:
    """A session id, deployment, expert or tenant as lineage records it."""
    if _LINEAGE.fullmatch(value) is None:
        raise ToolError(f"invalid {what} {value!r}: 1-128 letters, digits, '.', '_', ':', "
                        "'@', '/' or '-', starting with a letter or digit")
    return value


def document(name: str, description: str, parameters: Mapping[str, Any], source: str,
             example: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stored document of a tool version (what its digest covers)."""
    return {"kind": KIND, "name": name, "description": description,
            "parameters": dict(parameters), "source": source,
            "example": dict(example) if example is not None else None}


def canonical(doc: Any) -> bytes:
    """Sorted keys, no whitespace, ASCII: the same document is always the same bytes."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


def digest_of(stored: bytes) -> str:
    return "sha256:" + hashlib.sha256(stored).hexdigest()


# --- the automatic checks (advice) -------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One automatic check: ``ok`` True (passed), False (failed) or None (not run)."""

    name: str
    ok: bool | None
    detail: str

    def body(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def _parse(source: str) -> tuple[ast.Module | None, str]:
    try:
        return ast.parse(source), "the source parses as Python"
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        return None, f"the source does not parse{where}: {getattr(exc, 'msg', exc)}"


Func = ast.FunctionDef | ast.AsyncFunctionDef


def _the_function(module: ast.Module, name: str) -> tuple[Func | None, str]:
    defs = [n for n in module.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    named = [n for n in defs if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
             and n.name == name]
    others = sorted(n.name for n in defs if n.name != name or isinstance(n, ast.ClassDef))
    if not named:
        return None, (f"no top-level function {name!r}"
                      + (f" (it defines {', '.join(others)})" if others else ""))
    if len(named) > 1:
        return named[-1], f"{name!r} is defined {len(named)} times at top level"
    if others:
        return named[0], (f"besides {name!r} the source defines {', '.join(others)} at top "
                          "level: a tool is exactly one function")
    return named[0], f"defines exactly the function {name!r} at top level"


def _schema_problem(schema: Any, where: str, depth: int = 0) -> str | None:
    """What makes ``schema`` no JSON schema this catalog understands, or None."""
    if depth > MAX_SCHEMA_DEPTH:
        return f"{where} nests deeper than {MAX_SCHEMA_DEPTH} levels"
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return f"{where} is not a schema (an object or a boolean)"
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if not all(isinstance(k, str) and k in JSON_TYPES for k in kinds):
        return f"{where}.type {kind!r} is not a JSON type ({', '.join(sorted(JSON_TYPES))})"
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return f"{where}.properties is not an object"
    for key, sub in props.items():
        problem = _schema_problem(sub, f"{where}.properties.{key}", depth + 1)
        if problem:
            return problem
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return f"{where}.required is not a list of names"
    missing = [r for r in required if isinstance(props, dict) and r not in props]
    if missing:
        return f"{where}.required names {', '.join(missing)}, which properties lacks"
    for key in ("items", "additionalProperties"):
        if key in schema:
            problem = _schema_problem(schema[key], f"{where}.{key}", depth + 1)
            if problem:
                return problem
    return None


def _schema_check(parameters: Any) -> Check:
    problem = _schema_problem(parameters, "parameters")
    if problem is None and (not isinstance(parameters, dict)
                            or parameters.get("type") != "object"):
        problem = 'parameters is not an object schema ("type": "object")'
    if problem:
        return Check("schema", False, problem)
    return Check("schema", True, "parameters is a valid JSON object schema")


def _names_check(func: Func | None, parameters: Any) -> Check:
    """The schema's properties are the function's parameters, its required ones those
    without a default."""
    if func is None:
        return Check("names_match", False, "no function to compare the schema with")
    if not isinstance(parameters, dict) or not isinstance(parameters.get("properties", {}),
                                                          dict):
        return Check("names_match", False, "no schema properties to compare")
    a = func.args
    positional = [*a.posonlyargs, *a.args]
    names = [x.arg for x in (*positional, *a.kwonlyargs)]
    without_default = {x.arg for x in positional[:len(positional) - len(a.defaults)]}
    without_default |= {x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)
                        if d is None}
    props = set(parameters.get("properties", {}))
    required = parameters.get("required", [])
    required_set = set(required) if isinstance(required, list) else set()
    problems = []
    if props != set(names):
        problems.append(f"the schema's properties ({', '.join(sorted(props)) or 'none'}) "
                        f"are not the function's parameters ({', '.join(names) or 'none'})")
    if required_set != without_default:
        bare = ", ".join(sorted(without_default)) or "none"
        problems.append(f"required ({', '.join(sorted(required_set)) or 'none'}) is not the "
                        f"parameters without a default ({bare})")
    if problems:
        return Check("names_match", False, "; ".join(problems))
    return Check("names_match", True, "the schema names the function's parameters")


def docstring_of(source: str, name: str) -> str | None:
    """The named top-level function's docstring, when the source parses and has one."""
    module, _ = _parse(source)
    if module is None:
        return None
    func, _ = _the_function(module, name)
    return ast.get_docstring(func) if func is not None else None


def checks(name: str, source: str, parameters: Any) -> list[Check]:
    """Every automatic check, in a fixed order; ``example_runs`` is not run here."""
    module, parsed = _parse(source)
    out = [Check("parses", module is not None, parsed)]
    func: Func | None = None
    if module is None:
        out.append(Check("defines_function", False, "the source does not parse"))
    else:
        func, detail = _the_function(module, name)
        ok = func is not None and detail.startswith("defines exactly")
        out.append(Check("defines_function", ok, detail))
    out.append(_schema_check(parameters))
    out.append(_names_check(func, parameters))
    out.append(Check(EXAMPLE_CHECK, None, NOT_RUN))
    return out


def example_code(name: str, source: str, example: Mapping[str, Any]) -> str:
    """The cell that runs a tool's example: its source, then one call of the function
    with the example's arguments (decoded from JSON inside, so no argument is ever
    spliced into code), awaited when the function is a coroutine. The call is the cell's
    last expression, so its repr is the result."""
    args = repr(canonical(dict(example)).decode())
    return (f"{source}\n\n"
            "import asyncio as _mol_asyncio, inspect as _mol_inspect, json as _mol_json\n"
            f"_mol_result = {name}(**_mol_json.loads({args}))\n"
            "if _mol_inspect.isawaitable(_mol_result):\n"
            "    _mol_result = _mol_asyncio.run(_mol_result)\n"
            "_mol_result\n")


# --- the check before each load ------------------------------------------------------------


class ToolLoadRefused(ValueError):
    """A tool a loader must not load; ``code`` says why (``digest_mismatch``,
    ``missing_signature``, ``revoked_key``, ``untrusted_key``, ``bad_signature``,
    ``files_mismatch``, ``malformed_signature``, ``wrong_key``, ``not_a_tool``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class LoadableTool:
    """A tool that passed ``verify_load``: what the sandbox defines and offers."""

    name: str
    description: str
    parameters: dict[str, Any]
    source: str
    digest: str
    signed_by: str | None


def verify_load(stored: bytes, *, digest: str, signature: str | None = None,
                signer_key: str | None = None, signer_revoked: bool = False,
                require_signature: bool = False,
                trusted_signers: frozenset[str] = frozenset()) -> LoadableTool:
    """The tool in ``stored`` when it may be loaded, else ToolLoadRefused.

    ``digest`` is the one the approval named (the approved-tools answer): bytes that
    changed after approval hash to something else. A signature (given, or required by
    ``require_signature``) must verify with ``signer_key``, that key must not be revoked
    (and be one of ``trusted_signers`` when some are pinned), and the signed statement
    must list exactly the document with the sha256 of these bytes.
    """
    actual = digest_of(stored)
    if actual != digest:
        raise ToolLoadRefused("digest_mismatch", f"the tool's bytes hash to {actual}, not to "
                              f"the approved {digest}: they changed after approval")
    signed_by: str | None = None
    if signature is None:
        if require_signature:
            raise ToolLoadRefused("missing_signature", "a signature is required and the "
                                  "tool has none")
    else:
        if signer_key is None:
            raise ToolLoadRefused("missing_signature", "the tool is signed but no signer "
                                  "key came with it")
        if signer_revoked:
            raise ToolLoadRefused("revoked_key", "the key that signed the tool is revoked")
        signed_by = ms.key_id(signer_key)
        if trusted_signers and signed_by not in trusted_signers:
            raise ToolLoadRefused("untrusted_key", f"signed by key {signed_by[:16]}…, which "
                                  "is not one of the trusted signers")
        try:
            signed = ms.verify(signature, signer_key)
            ms.check_files(signed, {DOCUMENT_FILE: actual.removeprefix("sha256:")})
        except ms.SignatureError as exc:
            raise ToolLoadRefused(exc.code, exc.message) from None
    try:
        doc = json.loads(stored)
    except ValueError:
        raise ToolLoadRefused("not_a_tool", "the stored bytes are not JSON") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise ToolLoadRefused("not_a_tool", f"the document is not a {KIND} tool")
    fields = (doc.get("name"), doc.get("description"), doc.get("parameters"),
              doc.get("source"))
    if not (isinstance(fields[0], str) and isinstance(fields[1], str)
            and isinstance(fields[2], dict) and isinstance(fields[3], str)):
        raise ToolLoadRefused("not_a_tool", "the document lacks name, description, "
                              "parameters or source")
    return LoadableTool(fields[0], fields[1], fields[2], fields[3], actual, signed_by)
