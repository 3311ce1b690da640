"""What the router reports to the catalog in batches: usage and recorded routing decisions,
through one outbox.
"""
