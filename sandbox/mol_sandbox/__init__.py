"""The sandbox service: one isolated Python interpreter per session, for model-written
code (``mol sandbox serve``, docs/sandbox.md)."""
