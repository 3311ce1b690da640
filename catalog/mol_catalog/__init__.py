"""The adapter catalog service."""
