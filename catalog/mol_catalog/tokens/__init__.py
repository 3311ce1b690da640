"""tokens: endpoints, service, repository, schemas."""
