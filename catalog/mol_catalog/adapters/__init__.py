"""adapters: endpoints, service, repository, schemas."""
