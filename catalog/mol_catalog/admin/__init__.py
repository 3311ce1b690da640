"""Operations on the catalog as a whole: blob gc and blob verification (admin only)."""
