"""The web console at /ui: server-rendered pages over the catalog's services, and the
running stack (the router's status, metrics and a chat playground) when a router URL
is configured. docs/console.md."""
