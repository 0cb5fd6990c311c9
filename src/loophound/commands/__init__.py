"""CLI commands kept in their own modules; `loophound.cli` registers them."""
