"""Automatic routing: which expert a ``model: auto`` turn goes to. ``scores`` is the pure
decision over embeddings and keywords; ``heads`` the trained head (pure model and
fitting, and where heads come from); ``semantic`` and ``training`` do the I/O
(embeddings, files).
"""
