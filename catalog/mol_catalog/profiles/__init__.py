"""profiles: endpoints, service, repository, schemas."""
