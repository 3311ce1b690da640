"""The OpenAI-compatible expert router."""
