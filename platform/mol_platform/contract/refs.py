"""Adapter references and names, shared by every component.

A reference is ``namespace/name@ref`` where ``ref`` is an alias (``stable``,
``latest``), a version (``v3``) or a digest (``sha256:<64 hex>``). Names are DNS-label
like so they are safe in URLs, object keys and Kubernetes labels, and can never
traverse paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A namespace or adapter name: lowercase letters, digits, '-', '_' and '.', starting
# and ending alphanumeric, at most 63 characters. No '/', no '..'.
NAME_PATTERN = r"[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?"
ALIAS_PATTERN = r"[a-z][a-z0-9_-]{0,62}"
DIGEST_PATTERN = r"sha256:[0-9a-f]{64}"
MAX_VERSION = 2**31 - 1  # the catalog's version column is a 32-bit integer
# 1 to MAX_VERSION (2147483647) in decimal without leading zeros, as a pattern: schemas
# that document it (OpenAPI) then allow exactly the versions the catalog accepts.
VERSION_DIGITS = ("(?:[1-9][0-9]{0,8}|1[0-9]{9}|20[0-9]{8}|21[0-3][0-9]{7}|214[0-6][0-9]{6}"
                  "|2147[0-3][0-9]{5}|21474[0-7][0-9]{4}|214748[0-2][0-9]{3}"
                  "|2147483[0-5][0-9]{2}|21474836[0-3][0-9]|214748364[0-7])")
VERSION_PATTERN = f"v{VERSION_DIGITS}"
# A version where a number is expected (paths, form fields, CLI arguments): 3 or v3,
# never 03 or v03 (a second spelling of the same version).
VERSION_NUMBER_PATTERN = f"v?{VERSION_DIGITS}"
DNS_LABEL_PATTERN = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
# A base model's revision (a commit sha, a tag): what the catalog stores.
REVISION_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
# The whole name rule in one pattern (the lookahead refuses ".."), for schemas that
# document it (OpenAPI); ``is_valid_name`` is the same rule.
EXACT_NAME_PATTERN = rf"(?!.*\.\.){NAME_PATTERN}"
# ``usage`` / ``usage:<ns>``: report usage (what routers send) for those namespaces, nothing
# else; neither reads nor publishes.
SCOPE_PATTERN = rf"(?:read|admin|usage|(?:read|publish|usage):{EXACT_NAME_PATTERN})"

# Compiled without anchors: every check below uses ``fullmatch`` (``$`` would accept a
# trailing newline, and "acme\n" is a name nothing can resolve).
NAME_RE = re.compile(NAME_PATTERN)
DNS_LABEL_RE = re.compile(DNS_LABEL_PATTERN)
REF_RE = re.compile(
    rf"(?P<namespace>{NAME_PATTERN})/(?P<name>{NAME_PATTERN})"
    rf"@(?P<ref>{DIGEST_PATTERN}|{VERSION_PATTERN}|{ALIAS_PATTERN})"
)
ALIAS_RE = re.compile(ALIAS_PATTERN)
_VERSIONISH = re.compile(r"v[0-9]+")
_VERSION = re.compile(VERSION_PATTERN)
_VERSION_NUMBER = re.compile(VERSION_NUMBER_PATTERN)
_SCOPE = re.compile(SCOPE_PATTERN)
# Words a reference reserves: ``@latest`` always means the newest ready version.
RESERVED_ALIASES = frozenset({"latest"})
NAME_RULE = "use 1-63 lowercase letters, digits, '.', '_' or '-', starting and ending with " \
    "a letter or digit"


class RefError(ValueError):
    """A reference or name that does not follow the documented syntax."""


def is_valid_name(value: str) -> bool:
    return NAME_RE.fullmatch(value) is not None and ".." not in value


def is_dns_label(value: str) -> bool:
    """A Kubernetes DNS label (RFC 1123): 1-63 lowercase letters, digits and '-', a letter
    or digit at each end. Experts, deployments and head names are labels, because they
    become parts of object names and metric labels."""
    return DNS_LABEL_RE.fullmatch(value) is not None


def check_name(value: str, what: str = "name") -> str:
    """Adapter, base-model and serving-profile names (``what`` names the kind in errors)."""
    if not is_valid_name(value):
        raise RefError(f"invalid {what} {value!r}: {NAME_RULE}")
    return value


def check_namespace(value: str) -> str:
    return check_name(value, "namespace")


def check_tag(value: str) -> str:
    return check_name(value, "tag")


def alias_problem(value: str) -> str | None:
    """Why ``value`` cannot be an alias, or None when it can."""
    if value in RESERVED_ALIASES:
        return f"'{value}' is reserved: @{value} always means the newest ready version"
    if value.startswith("sha256:") or re.fullmatch(DIGEST_PATTERN, value):
        return "it reads as a digest reference (@sha256:...), which names content"
    if _VERSIONISH.fullmatch(value):
        return f"it reads as a version reference (@{value}); aliases must not look like vN"
    if ALIAS_RE.fullmatch(value) is None:
        return ("use a lowercase letter first, then lowercase letters, digits, '-' or '_' "
                "(at most 63 characters)")
    return None


def is_valid_alias(value: str) -> bool:
    """Aliases are names like ``stable``; ``latest``, ``vN`` and digests are references."""
    return alias_problem(value) is None


def check_alias(value: str) -> str:
    problem = alias_problem(value)
    if problem is not None:
        raise RefError(f"invalid alias {value!r}: {problem}")
    return value


def check_scope(value: str) -> str:
    """A token scope: ``read``, ``admin``, ``usage``, ``read:<namespace>``,
    ``publish:<namespace>`` or ``usage:<namespace>``."""
    if _SCOPE.fullmatch(value) is not None:
        return value
    raise RefError(f"invalid scope {value!r}: use read, read:<namespace>, "
                   "publish:<namespace>, usage, usage:<namespace> or admin")


def parse_version(text: str, what: str = "version") -> int:
    """``3`` or ``v3`` -> 3, within 1..MAX_VERSION; RefError otherwise (``03``, ``v03``
    included: the full-match rule of ``VERSION_NUMBER_PATTERN``, the same as
    ``@vN`` in a reference). The one version parser: the catalog's path and form
    fields and the CLI's arguments use it."""
    if _VERSION_NUMBER.fullmatch(text) is None:
        raise RefError(f"invalid {what} {text[:40]!r}: use a number from 1 to "
                       f"{MAX_VERSION} such as 3 or v3, without leading zeros")
    return int(text.removeprefix("v"))


@dataclass(frozen=True, slots=True)
class AdapterRef:
    """A parsed ``namespace/name@ref``."""

    namespace: str
    name: str
    ref: str

    @classmethod
    def parse(cls, text: str) -> AdapterRef:
        m = REF_RE.fullmatch(text)
        # An alias may not look like a version: `v0` or `v01` would be ambiguous.
        ref = m["ref"] if m is not None else ""
        if m is None or ".." in text or (_VERSIONISH.fullmatch(ref) and (
                not _VERSION.fullmatch(ref) or _version_or_none(ref) is None)):
            raise RefError(
                f"invalid adapter reference {text!r}: expected namespace/name@ref where ref is "
                "an alias (e.g. stable, latest), a version (v1 to "
                f"v{MAX_VERSION}) or a digest (sha256:<64 hex>)"
            )
        return cls(m["namespace"], m["name"], m["ref"])

    @property
    def adapter(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def version(self) -> int | None:
        """The version number when the ref is ``vN``, else None."""
        return _version_or_none(self.ref) if _VERSION.fullmatch(self.ref) else None

    @property
    def digest(self) -> str | None:
        return self.ref if self.ref.startswith("sha256:") else None

    @property
    def immutable(self) -> bool:
        """True for ``@vN`` and ``@sha256:...``: the only names engines ever see."""
        return self.version is not None or self.digest is not None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}@{self.ref}"


def number_pattern(limit: int) -> str:
    """A regex (no anchors) for the decimal numbers 1..``limit``, no leading zeros: what
    a schema pattern can say where a parser would compare numbers (``vN`` refs)."""
    text = str(limit)
    options = [f"[1-9][0-9]{{0,{len(text) - 2}}}"] if len(text) > 1 else []
    for i, digit in enumerate(text):
        low = "1" if i == 0 else "0"
        top = int(digit) - 1
        if top >= int(low):
            rest = len(text) - i - 1
            options.append(f"{text[:i]}[{low}-{top}]" + (f"[0-9]{{{rest}}}" if rest else ""))
    options.append(text)
    return "(?:" + "|".join(options) + ")"


def _version_or_none(ref: str) -> int | None:
    try:
        return parse_version(ref)
    except RefError:
        return None
