"""usage: endpoints, service, repository, schemas (what routers report, daily roll-ups)."""
