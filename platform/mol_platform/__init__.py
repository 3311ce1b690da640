"""MoL Platform's ground floor: what the catalog, operator and router share."""

__version__ = "0.1.0"
