"""Which expert or adapter serves a request: the pure rules (``rules``, ``handoff``) and
the resolver that turns references into immutable names through the catalog.
"""
