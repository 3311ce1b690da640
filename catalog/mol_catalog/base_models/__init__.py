"""base models: endpoints, service, repository, schemas."""
