"""resolve and blob download: endpoints, service, repository."""
