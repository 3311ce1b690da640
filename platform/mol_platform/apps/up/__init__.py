"""``mol up``: the embedded default (catalog, engine, router) as supervised processes."""
