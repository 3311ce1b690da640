"""blobs: store (local folder, S3), presign, repository, orphans (gc), verify, leftovers."""
