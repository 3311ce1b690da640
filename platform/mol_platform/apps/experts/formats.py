"""Judge an expert's answer against the shape its evaluation line expects.

An evaluation line names what a good answer looks like (``expect``): a fenced code
block that parses, one well-formed HTML document, one tool call valid for the
offered schema, a handoff to the right expert, or a plain answer with no call.
These checks are deliberately about form, not quality: a LoRA expert on a small
base model is first judged on whether it reliably answers in its format, which is
what the router and the clients downstream depend on. Standard library only, so the
same functions run in training jobs, benchmarks and tests.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from typing import Any

HANDOFF_TOOL = "handoff"
HANDOFF_EXPERTS = frozenset({"coding", "ui", "agent", "chat"})

_LANGUAGE_ALIASES = {"py": "python", "python3": "python", "js": "javascript",
                     "sh": "bash", "shell": "bash", "console": "bash"}

# A fence opens at the start of a line with ``` and an optional info string; the block
# ends at the next line that is only ```. An unclosed fence is no block: a truncated
# answer is a broken answer.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([^\n`]*)\n(.*?)^[ \t]*```[ \t]*$",
                    re.MULTILINE | re.DOTALL)

_VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input",
                        "link", "meta", "source", "track", "wbr"})


def _language(info: str) -> str:
    word = info.strip().split(maxsplit=1)[0].lower() if info.strip() else ""
    return _LANGUAGE_ALIASES.get(word, word)


def code_block(text: str, language: str | None = None) -> str | None:
    """The code of the first fenced block in ``language`` (any block when None).

    Aliases count as their language (``py`` is python, ``js`` javascript, ``sh``
    bash), since models write both and either renders the same for the reader.
    """
    wanted = _language(language) if language else None
    for match in _FENCE.finditer(text):
        if wanted is None or _language(match.group(1)) == wanted:
            return match.group(2)
    return None


class _StrictHTML(HTMLParser):
    """Records the first structural error: a strict reader's view of the document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.roots = 0
        self.error: str | None = None

    def _fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self.stack:
            if tag != "html":
                self._fail(f"<{tag}> outside <html>")
                return
            self.roots += 1
            if self.roots > 1:
                self._fail("more than one <html> document")
        if tag not in _VOID_TAGS:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self.stack:
            self._fail(f"<{tag}/> outside <html>")

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID_TAGS:
            self._fail(f"end tag for void element </{tag}>")
        elif not self.stack:
            self._fail(f"</{tag}> with nothing open")
        elif self.stack[-1] != tag:
            self._fail(f"</{tag}> closes <{self.stack[-1]}>")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not self.stack and data.strip():
            self._fail("text outside <html>")


def check_html(text: str) -> tuple[bool, str]:
    """One complete document: doctype or <html> first, every non-void tag closed in
    order, nothing but whitespace around it (browsers forgive all of this; an
    answer that a strict parser rejects is one the expert has not learned)."""
    body = text.strip()
    if not re.match(r"(?i)<!doctype html>|<html[\s>]", body):
        return False, "does not start with <!DOCTYPE html> or <html>"
    parser = _StrictHTML()
    parser.feed(body)
    parser.close()
    if parser.error is not None:
        return False, parser.error
    if parser.rawdata.strip():
        return False, "unterminated markup at the end"
    if parser.roots != 1:
        return False, "no <html> element"
    if parser.stack:
        return False, f"unclosed <{parser.stack[-1]}>"
    return True, "well-formed html document"


def _type_ok(value: object, kind: object) -> bool:
    if isinstance(kind, list):
        return any(_type_ok(value, k) for k in kind)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "null":
        return value is None
    return kind is None  # no declared type: anything goes


def schema_errors(value: object, schema: Mapping[str, Any], where: str = "arguments") -> str | None:
    """The first way ``value`` breaks a JSON schema (the subset tools use), or None.

    Keys the schema does not declare are errors: a call with an invented argument
    fails against the real function just like one with a missing argument.
    """
    if not _type_ok(value, schema.get("type")):
        return f"{where}: expected {schema.get('type')}, got {type(value).__name__}"
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return f"{where}: {value!r} not in {enum}"
    if isinstance(value, dict):
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        for key in schema.get("required") or ():
            if key not in value:
                return f"{where}: missing required {key!r}"
        for key, item in value.items():
            if key not in props:
                if props or schema.get("additionalProperties") is False:
                    return f"{where}: unknown key {key!r}"
                continue
            sub = props[key]
            if isinstance(sub, dict):
                err = schema_errors(item, sub, f"{where}.{key}")
                if err:
                    return err
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            err = schema_errors(item, schema["items"], f"{where}[{i}]")
            if err:
                return err
    return None


def _call_parts(call: Mapping[str, Any]) -> tuple[str, object]:
    fn = call.get("function")
    fn = fn if isinstance(fn, Mapping) else call
    name = fn.get("name")
    return (name if isinstance(name, str) else ""), fn.get("arguments")


def _arguments(raw: object) -> dict[str, Any] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return None
    return raw if isinstance(raw, dict) else None


def _offered(tools: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    for tool in tools:
        fn = tool.get("function")
        if isinstance(fn, Mapping) and fn.get("name") == name:
            params = fn.get("parameters")
            return params if isinstance(params, Mapping) else {"type": "object"}
    return None


def _judge_code(expect: Mapping[str, Any], content: str) -> tuple[bool, str]:
    language = str(expect.get("language") or "python")
    code = code_block(content, language)
    if code is None:
        other = code_block(content)
        return False, ("no fenced block" if other is None
                       else f"no {language} block (a block in another language)")
    if not code.strip():
        return False, "empty code block"
    if _language(language) == "python":
        try:
            ast.parse(code)
        except SyntaxError as exc:
            return False, f"python does not parse: {exc.msg} (line {exc.lineno})"
    return True, f"{language} block"


def _judge_tool_call(expect: Mapping[str, Any], calls: Sequence[Mapping[str, Any]],
                     tools: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
    if len(calls) != 1:
        return False, f"expected one tool call, got {len(calls)}"
    name, raw = _call_parts(calls[0])
    if name != expect.get("name"):
        return False, f"called {name!r}, expected {expect.get('name')!r}"
    schema = _offered(tools, name)
    if schema is None:
        return False, f"{name!r} was not offered"
    args = _arguments(raw)
    if args is None:
        return False, "arguments are not a JSON object"
    err = schema_errors(args, schema)
    return (False, err) if err else (True, f"valid call to {name}")


def _judge_handoff(expect: Mapping[str, Any], calls: Sequence[Mapping[str, Any]],
                   tools: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
    if len(calls) != 1:
        return False, f"expected one handoff call, got {len(calls)}"
    name, raw = _call_parts(calls[0])
    if name != HANDOFF_TOOL:
        return False, f"called {name!r}, not {HANDOFF_TOOL!r}"
    args = _arguments(raw)
    if args is None:
        return False, "arguments are not a JSON object"
    schema = _offered(tools, HANDOFF_TOOL)
    if schema is not None:
        err = schema_errors(args, schema)
        if err:
            return False, err
    expert, summary = args.get("expert"), args.get("summary")
    if expert != expect.get("expert"):
        return False, f"handed to {expert!r}, expected {expect.get('expert')!r}"
    if not isinstance(summary, str) or not summary.strip():
        return False, "empty summary"
    return True, f"handoff to {expert}"


def judge(expect: Mapping[str, Any], content: str | None,
          tool_calls: Sequence[Mapping[str, Any]] | None = None,
          tools: Sequence[Mapping[str, Any]] = ()) -> tuple[bool, str]:
    """Whether an answer (its text and tool calls) has the expected shape, and why.

    ``tools`` are the tool definitions the request offered: a call is only valid
    against the schema the client actually sent.
    """
    text = content or ""
    calls = list(tool_calls or ())
    kind = expect.get("kind")
    if kind in ("code", "html") and calls:
        return False, f"expected {kind}, got a tool call"
    if kind == "code":
        return _judge_code(expect, text)
    if kind == "html":
        return check_html(text)
    if kind == "tool_call":
        return _judge_tool_call(expect, calls, tools)
    if kind == "handoff":
        return _judge_handoff(expect, calls, tools)
    if kind in ("no_handoff", "none_fits"):
        if calls:
            name, _ = _call_parts(calls[0])
            return False, f"expected a plain answer, got a call to {name!r}"
        if not text.strip():
            return False, "empty answer"
        return True, "plain answer"
    return False, f"unknown expect kind {kind!r}"
