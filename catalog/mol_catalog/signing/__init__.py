"""Signing keys, the namespace signature policy and checking signatures at publish."""
