"""webhooks: receivers of a namespace's events, delivered in the background from the outbox."""
