"""The named queries that ship with loophound: one `.sql` file each, edited here and installed
as the package `loophound.named_queries` (see `loophound.queries`)."""
