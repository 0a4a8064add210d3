"""The historical archive (KIP-405 tiered storage): log segments kept in an S3-compatible object store."""
