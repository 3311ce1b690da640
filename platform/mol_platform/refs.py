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
VERSION_PATTERN = r"v[1-9][0-9]{0,9}"
DNS_LABEL_PATTERN = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"

NAME_RE = re.compile(rf"^{NAME_PATTERN}$")
DNS_LABEL_RE = re.compile(rf"^{DNS_LABEL_PATTERN}$")
REF_RE = re.compile(
    rf"^(?P<namespace>{NAME_PATTERN})/(?P<name>{NAME_PATTERN})"
    rf"@(?P<ref>{DIGEST_PATTERN}|{VERSION_PATTERN}|{ALIAS_PATTERN})$"
)


_VERSIONISH = re.compile(r"^v[0-9]+$")
_VERSION = re.compile(rf"^{VERSION_PATTERN}$")


def is_valid_alias(value: str) -> bool:
    """Aliases are names like ``stable``; ``vN`` and digests are not aliases."""
    return bool(re.fullmatch(ALIAS_PATTERN, value)) and not _VERSIONISH.match(value)


class RefError(ValueError):
    """A reference or name that does not follow the documented syntax."""


def is_valid_name(value: str) -> bool:
    return bool(NAME_RE.match(value)) and ".." not in value


def check_name(value: str, what: str = "name") -> str:
    if not is_valid_name(value):
        raise RefError(
            f"invalid {what} {value!r}: use 1-63 lowercase letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )
    return value


@dataclass(frozen=True, slots=True)
class AdapterRef:
    """A parsed ``namespace/name@ref``."""

    namespace: str
    name: str
    ref: str

    @classmethod
    def parse(cls, text: str) -> AdapterRef:
        m = REF_RE.match(text)
        # An alias may not look like a version: `v0` or `v01` would be ambiguous.
        ref = m["ref"] if m is not None else ""
        if m is None or ".." in text or (_VERSIONISH.match(ref) and not _VERSION.match(ref)):
            raise RefError(
                f"invalid adapter reference {text!r}: expected namespace/name@ref where ref is "
                "an alias (e.g. stable, latest), a version (v3) or a digest (sha256:<64 hex>)"
            )
        return cls(m["namespace"], m["name"], m["ref"])

    @property
    def adapter(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def version(self) -> int | None:
        """The version number when the ref is ``vN``, else None."""
        if re.fullmatch(VERSION_PATTERN, self.ref):
            return int(self.ref[1:])
        return None

    @property
    def digest(self) -> str | None:
        return self.ref if self.ref.startswith("sha256:") else None

    @property
    def immutable(self) -> bool:
        """True for ``@vN`` and ``@sha256:...``: the only names engines ever see."""
        return self.version is not None or self.digest is not None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}@{self.ref}"
