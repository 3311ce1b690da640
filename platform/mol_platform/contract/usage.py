"""The usage report routers send the catalog (``POST /v1/usage``): its limits, shared by
the catalog's schema and the router's reporter."""

from __future__ import annotations

# A batch id: what the reporter picks (uuid4 hex) to make a retry recognisable.
BATCH_ID_PATTERN = r"[A-Za-z0-9_-]{8,64}"
MAX_BATCH_ENTRIES = 1000  # entries per batch
MAX_REQUESTS = 10**9  # per entry
MAX_TOKENS = 10**13  # per entry and kind
