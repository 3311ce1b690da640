"""events: endpoints, service, repository, schemas."""
