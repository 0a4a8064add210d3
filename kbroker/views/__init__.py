"""Filtered view topics: read-only topics whose records are the records of a source topic that
match a filter, at the source's offsets."""
