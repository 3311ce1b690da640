"""The engine replicas: discovery, the tracker (health, load, adapters held), adapter
avoidance, the connection pool and the pure replica-picking policies.
"""
