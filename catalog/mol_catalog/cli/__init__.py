"""The ``mol catalog`` verbs: ``main`` (the group, serve and the adapter verbs), ``admin``,
``versions`` (pull, delete, events) and ``common`` (their shared plumbing).

``app`` is named here because the ``mol.commands`` entry point, ``mol_catalog.cli:app``,
loads it from the package.
"""

from mol_catalog.cli.main import app

__all__ = ["app"]
