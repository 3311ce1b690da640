"""Names derived from a MoLDeployment's name, always within Kubernetes' limits.

A child is called ``<parent><suffix>`` (``macaron-engine``). When that would pass the
63 characters of a DNS label (every name made here must also be a Service name, a
label value or a catalog name), the parent is cut and a hash of the whole parent keeps
the names of different parents apart, the way Deployments name their ReplicaSets:
``<cut parent>-<8 hex of sha256(parent)><suffix>``. Names that fit are never changed,
so objects made before are still found by name.
"""

from __future__ import annotations

import hashlib

NAME_LIMIT = 63
HASH_LENGTH = 8


def child_name(parent: str, suffix: str = "", limit: int = NAME_LIMIT) -> str:
    """``parent + suffix``, or its stable shortened form when longer than ``limit``.

    The result starts like ``parent`` and ends with ``suffix``, so a parent that starts
    with a letter and a suffix that ends with a letter or digit give a DNS-1035 label."""
    name = parent + suffix
    if len(name) <= limit:
        return name
    keep = limit - len(suffix) - HASH_LENGTH - 1
    if keep < 1:
        raise ValueError(f"suffix {suffix!r} leaves no room for a name within {limit}")
    digest = hashlib.sha256(parent.encode()).hexdigest()[:HASH_LENGTH]
    head = parent[:keep].rstrip("-._")  # a valid parent starts alphanumeric: never empty
    return f"{head}-{digest}{suffix}"
