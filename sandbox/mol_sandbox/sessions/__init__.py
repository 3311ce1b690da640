"""Sessions: the HTTP API, their lifecycle (limits, reaping, restarts) and wire shapes."""
