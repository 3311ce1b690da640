"""Eval reports attached to adapter versions."""
