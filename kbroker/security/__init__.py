"""Security of the broker's connections: TLS contexts and the principal of a connection."""
