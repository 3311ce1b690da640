"""heads: trained router heads as catalog artifacts (versions, aliases, documents)."""
