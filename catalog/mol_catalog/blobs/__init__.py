"""Blobs: the content-addressed store, presigned URLs, references, gc, verify, leftovers."""
