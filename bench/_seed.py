"""Bulk-seed the catalog's own tables (mol_catalog.models) for the benchmark.

Base models and serving profiles are registered through the REST API first (so their
stored shapes are exactly what the service computes); then adapters, versions, tags,
blobs references, aliases, alias history and verdicts are COPYed in, shaped like the
rows a publish writes: every adapter has 3 ready versions, `stable` -> v2, two tags,
and a stored verdict for its base's profile. Adapter shapes are a realistic mix (see
_shapes: a third Llama-3-8B all-linear r16); their configs and shape maps are
shared_docs rows under the digests the service computes. Seeded blobs are referenced,
not uploaded: resolve answers from the version row and never reads a blob.
"""

from __future__ import annotations

import hashlib
import json
import random
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from _pg import (
    bulk_connection,
    chunked,
    copy_text,
    drop_for_load,
    esc,
    progress,
    restore_after_load,
)
from _shapes import (
    BIG_BASE,
    DROPOUTS,
    LLAMA_8B_ALL_LINEAR_R16,
    SMALL_FAMILIES,
    Family,
    adapter_config,
    lora_shapes,
    weights_size,
)
from mol_catalog.shared_docs import canonical, digest_of

TABLES = ("shared_docs", "namespaces", "adapters", "adapter_tags", "versions", "version_blobs",
          "aliases", "alias_history", "verdicts")
ID_TABLES = ("namespaces", "adapters", "versions", "alias_history")
VERSIONS = 3
ALIAS = "stable"
ALIAS_VERSION = 2
PER_NAMESPACE = 1000
TS = "2026-01-01 00:00:00+00"
TAGS = ("chat", "code", "support", "legal", "finance", "medical", "sql", "summarize",
        "translate", "agent", "ui", "search", "rag", "classify", "extract", "math", "tools",
        "safety", "style", "sales")
WORDS = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka",
         "cyberdyne", "soylent", "tyrell", "aperture", "oscorp", "vandelay", "pied", "dunder")
KINDS = ("assistant", "coder", "helpdesk", "reviewer", "tutor", "planner", "writer", "router",
         "triage", "analyst", "critic", "scribe")
BASE_NAMES = ("qwen3-8b", "llama-3-8b", "mistral-7b", "gemma-2-9b")

@dataclass(frozen=True)
class SeedBase:
    """A registered base model and its serving profile, read back from the database."""

    id: int
    name: str
    revision: str
    profile: str
    profile_id: int
    generation: int


def read_bases(url: str) -> list[SeedBase]:
    from _pg import libpq

    with psycopg.connect(libpq(url)) as conn:
        rows = conn.execute(
            "SELECT b.id, b.name, b.revision, p.name, p.id, p.generation FROM base_models b "
            "JOIN serving_profiles p ON p.base_model_id = b.id ORDER BY b.id").fetchall()
    return [SeedBase(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]), int(r[5]))
            for r in rows]


def base_of(bases: list[SeedBase], i: int) -> SeedBase:
    """Llama-3-8B for the all-linear r16 third, one of the small bases for the others."""
    big = [b for b in bases if b.name == BIG_BASE]
    if Layout.family(i) is LLAMA_8B_ALL_LINEAR_R16 and big:
        return big[0]
    small = [b for b in bases if b.name != BIG_BASE] or bases
    return small[(Layout.mix(i) >> 16) % len(small)]


@dataclass(frozen=True)
class Layout:
    """Deterministic names and attributes of adapter i (1-based)."""

    n: int

    @property
    def namespaces(self) -> int:
        return max(1, -(-self.n // PER_NAMESPACE))

    @staticmethod
    def namespace(i: int) -> str:
        return f"team-{(i - 1) // PER_NAMESPACE:05d}"

    @staticmethod
    def name(i: int) -> str:
        return f"{WORDS[i % len(WORDS)]}-{KINDS[(i // len(WORDS)) % len(KINDS)]}-{i:07d}"

    @staticmethod
    def mix(i: int) -> int:
        """A cheap hash so that base, tags and rank are not correlated with each other."""
        return (i * 2654435761) & 0xFFFFFFFF

    @staticmethod
    def tags(i: int) -> tuple[str, str]:
        h = Layout.mix(i)
        first = h % len(TAGS)
        second = (first + 1 + (h >> 8) % (len(TAGS) - 1)) % len(TAGS)
        return TAGS[first], TAGS[second]

    @staticmethod
    def family(i: int) -> Family:
        """A third (and one) of the adapters are Llama-3-8B all-linear r16."""
        if i % 3 == 1:
            return LLAMA_8B_ALL_LINEAR_R16
        return SMALL_FAMILIES[(Layout.mix(i) >> 24) % len(SMALL_FAMILIES)]

    @staticmethod
    def dropout(i: int) -> float:
        """Each team trains with its own dropout: configs differ across teams."""
        return DROPOUTS[(i - 1) // PER_NAMESPACE % len(DROPOUTS)]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _json(value: Any) -> str:
    return esc(json.dumps(value, separators=(",", ":")))


class Rows:
    """Text-format COPY lines per table."""

    def __init__(self, n: int, bases: list[SeedBase]) -> None:
        if not bases:
            raise RuntimeError("no base model with a serving profile registered before seeding")
        self.n, self.bases, self.layout = n, bases, Layout(n)
        families = (LLAMA_8B_ALL_LINEAR_R16, *SMALL_FAMILIES)
        # adapter_config.json bytes per (base, family, dropout) in use; shape maps per family
        small = [b.name for b in bases if b.name != BIG_BASE] or [b.name for b in bases]
        big = [BIG_BASE] if len(small) < len(bases) else small  # as base_of picks
        used = {(b, f) for b in small for f in SMALL_FAMILIES}
        used |= {(b, LLAMA_8B_ALL_LINEAR_R16) for b in big}
        self.config = {(b, f, d): json.dumps(adapter_config(b, f.rank, f.targets, d)).encode()
                       for b, f in used for d in DROPOUTS}
        self.shapes = {f: {k: list(v) for k, v in lora_shapes(f).items()} for f in families}
        self.docs = {digest_of(json.loads(c)): c.decode() for c in self.config.values()}
        self.docs |= {digest_of(m): canonical(m).decode() for m in self.shapes.values()}
        self.modules = {f: _json(sorted(f.targets)) for f in families}
        self.sizes = {f: weights_size(f) for f in families}
        # per (base, family, dropout): the config file's blob digest and the two doc digests
        self.cfg_file = {k: "sha256:" + hashlib.sha256(c).hexdigest()
                         for k, c in self.config.items()}
        shape_digest = {f: digest_of(m) for f, m in self.shapes.items()}
        self.doc_refs = {k: f"{digest_of(json.loads(c))}\t{shape_digest[k[1]]}"
                         for k, c in self.config.items()}

    def base(self, i: int) -> SeedBase:
        return base_of(self.bases, i)

    def namespaces(self) -> Iterator[str]:
        for k in range(self.layout.namespaces):
            yield f"{k + 1}\tteam-{k:05d}\t{TS}\n"

    def adapters(self) -> Iterator[str]:
        for i in range(1, self.n + 1):
            b = self.base(i)
            name, ns = Layout.name(i), Layout.namespace(i)
            tags = _json(sorted(Layout.tags(i)))
            labels = _json({"team": ns, "tier": "gold" if i % 10 == 0 else "standard"})
            yield (f"{i}\t{(i - 1) // PER_NAMESPACE + 1}\t{name}\t{ns}/{name}\t{b.id}\t{b.name}"
                   f"\t{tags}\t{labels}\t{VERSIONS}\t{VERSIONS}\t{TS}\t{TS}\n")

    def adapter_tags(self) -> Iterator[str]:
        for i in range(1, self.n + 1):
            b = self.base(i)
            full_name = f"{Layout.namespace(i)}/{Layout.name(i)}"
            for tag in Layout.tags(i):
                yield f"{tag}\t{i}\t{b.name}\t{b.id}\t{full_name}\n"

    def shared_docs(self) -> Iterator[str]:
        for digest, body in sorted(self.docs.items()):
            yield f"{digest}\t{esc(body)}\n"

    def _key(self, i: int) -> tuple[str, Family, float]:
        return self.base(i).name, Layout.family(i), Layout.dropout(i)

    def versions(self) -> Iterator[str]:
        for i in range(1, self.n + 1):
            b = self.base(i)
            key = self._key(i)
            family = key[1]
            rank, cfg_size, w_size = family.rank, len(self.config[key]), self.sizes[family]
            cfg_file, docs = self.cfg_file[key], self.doc_refs[key]
            for k in range(1, VERSIONS + 1):
                vid = (i - 1) * VERSIONS + k
                files = (f'[{{"path":"adapter_config.json","digest":"{cfg_file}",'
                         f'"size":{cfg_size}}},{{"path":"adapter_model.safetensors",'
                         f'"digest":"sha256:{_sha(f"w{vid}")}","size":{w_size}}}]')
                parent = str(k - 1) if k > 1 else "\\N"
                yield (f"{vid}\t{i}\t{k}\tsha256:{_sha(f'm{vid}')}\t{b.id}\t{rank}\t{2.0 * rank}"
                       f"\t{self.modules[family]}\tready\t\\N\t{parent}\t\\N"
                       f"\t{cfg_size + w_size}\t{files}\t{docs}\tbench\t{TS}\n")

    def version_blobs(self) -> Iterator[str]:
        for i in range(1, self.n + 1):
            cfg_file = self.cfg_file[self._key(i)]
            for k in range(1, VERSIONS + 1):
                vid = (i - 1) * VERSIONS + k
                yield f"{cfg_file}\t{vid}\n"
                yield f"sha256:{_sha(f'w{vid}')}\t{vid}\n"

    def aliases(self) -> Iterator[str]:
        for i in range(1, self.n + 1):
            yield f"{i}\t{ALIAS}\t{ALIAS_VERSION}\t{TS}\n"

    def alias_history(self) -> Iterator[str]:
        for i in range(1, self.n + 1):
            yield f"{i}\t{i}\t{ALIAS}\t{ALIAS_VERSION}\t\\N\tbench\t{TS}\n"

    def verdicts(self) -> Iterator[str]:
        for i in range(1, self.n + 1):
            b = self.base(i)
            for k in range(1, VERSIONS + 1):
                vid = (i - 1) * VERSIONS + k
                yield f"{vid}\t{b.profile_id}\t{b.generation}\tt\t[]\t{TS}\n"


COLUMNS: dict[str, tuple[tuple[str, ...], int]] = {
    # table: (columns, rows per adapter)
    "shared_docs": (("digest", "body"), -1),
    "namespaces": (("id", "name", "created_at"), 0),
    "adapters": (("id", "namespace_id", "name", "full_name", "base_model_id", "base_name",
                  "tags", "labels", "latest_version", "version_count", "created_at",
                  "updated_at"), 1),
    "adapter_tags": (("tag", "adapter_id", "base_name", "base_model_id", "full_name"), 2),
    "versions": (("id", "adapter_id", "number", "digest", "base_model_id", "rank", "alpha",
                  "target_modules", "status", "yank_reason", "parent", "source", "size",
                  "files", "config_digest", "tensors_digest", "created_by", "created_at"),
                 VERSIONS),
    "version_blobs": (("digest", "version_id"), 2 * VERSIONS),
    "aliases": (("adapter_id", "name", "version", "updated_at"), 1),
    "alias_history": (("id", "adapter_id", "alias", "version", "previous", "changed_by",
                       "changed_at"), 1),
    "verdicts": (("version_id", "profile_id", "profile_generation", "compatible", "reasons",
                  "computed_at"), VERSIONS),
}


def seed(url: str, n: int) -> None:
    """Load n adapters x 3 versions into an empty, migrated catalog database."""
    rows = Rows(n, read_bases(url))
    with bulk_connection(url) as conn:
        existing = conn.execute("SELECT count(*) FROM adapters").fetchone()
        if existing and int(str(existing[0])) > 0:
            raise RuntimeError("the catalog database already holds adapters; seed an empty one")
        saved = drop_for_load(conn, TABLES)
        for table in TABLES:
            columns, per = COLUMNS[table]
            total = {0: rows.layout.namespaces, -1: len(rows.docs)}.get(per, n * per)
            copy_text(conn, table, columns, chunked(getattr(rows, table)()), total)
        progress("rebuilding keys and indexes, then VACUUM (ANALYZE)")
        restore_after_load(conn, saved, TABLES)
        for table in ID_TABLES:
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                         f"(SELECT coalesce(max(id), 1) FROM {table}))")


# --- request paths for wrk ------------------------------------------------------------


def resolve_paths(path: Path, n: int, bases: list[SeedBase], sample: int, seed: int = 11) -> Path:
    rng = random.Random(seed)
    with path.open("w") as fh:
        for _ in range(min(sample, n)):
            i = rng.randint(1, n)
            profile = base_of(bases, i).profile
            fh.write(f"/v1/resolve/{Layout.namespace(i)}/{Layout.name(i)}@{ALIAS}"
                     f"?profile={profile}\n")
    return path


def listing_paths(path: Path, bases: list[SeedBase], limit: int) -> Path:
    """First pages filtered by base and tag: every (base, tag) pair."""
    with path.open("w") as fh:
        for b in bases:
            for tag in TAGS:
                fh.write(f"/v1/adapters?base={b.name}&tag={tag}&limit={limit}\n")
    return path


def search_paths(path: Path, n: int, sample: int, limit: int, seed: int = 13) -> Path:
    """Substring searches: half common word fragments, half rare digit fragments."""
    rng = random.Random(seed)
    with path.open("w") as fh:
        for j in range(sample):
            if j % 2 == 0:
                q = f"{rng.choice(WORDS)}-{rng.choice(KINDS)[:4]}"
            else:
                q = f"{rng.randint(1, n):07d}"[2:]
            fh.write(f"/v1/adapters?q={urllib.parse.quote(q)}&limit={limit}\n")
    return path


def console_paths(path: Path, n: int, bases: list[SeedBase], sample: int,
                  seed: int = 17) -> Path:
    """Console pages (/ui) as a browser asks for them, in turn: a search by base and tag,
    a text search, an adapter's page and one of its versions' pages."""
    rng = random.Random(seed)
    with path.open("w") as fh:
        for j in range(sample):
            i = rng.randint(1, n)
            page = f"/ui/adapters/{Layout.namespace(i)}/{Layout.name(i)}"
            kind = j % 4
            if kind == 0:
                fh.write(f"/ui/adapters?base={rng.choice(bases).name}&tag={rng.choice(TAGS)}\n")
            elif kind == 1:
                q = f"{rng.choice(WORDS)}-{rng.choice(KINDS)[:4]}"
                fh.write(f"/ui/adapters?q={urllib.parse.quote(q)}\n")
            elif kind == 2:
                fh.write(page + "\n")
            else:
                fh.write(f"{page}/versions/{rng.randint(1, VERSIONS)}\n")
    return path


def console_filters(n: int, bases: list[SeedBase], sample: int,
                    seed: int = 19) -> list[dict[str, str]]:
    """Filter sets of the console's adapter list (base model, tag, namespace, text), each
    alone and in the pairs a person narrows a search with, in turn."""
    rng = random.Random(seed)
    out: list[dict[str, str]] = []
    for j in range(sample):
        ns = Layout.namespace(rng.randint(1, n))
        base = rng.choice(bases).name
        tag = rng.choice(TAGS)
        q = f"{rng.choice(WORDS)}-{rng.choice(KINDS)[:4]}"
        out.append(({"base": base}, {"tag": tag}, {"namespace": ns}, {"q": q},
                    {"base": base, "tag": tag}, {"base": base, "namespace": ns},
                    {"tag": tag, "namespace": ns}, {"q": q, "base": base},
                    {"q": q, "namespace": ns}, {"q": q, "tag": tag})[j % 10])
    return out


def console_list_paths(path: Path, queries: list[dict[str, str]]) -> Path:
    """The console's adapter list (/ui/adapters) for each filter set (cursor included)."""
    with path.open("w") as fh:
        for query in queries:
            fh.write(f"/ui/adapters?{urllib.parse.urlencode(query)}\n")
    return path
