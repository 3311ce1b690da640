"""namespaces: per-namespace policy (protected aliases) and where aliases are served."""
