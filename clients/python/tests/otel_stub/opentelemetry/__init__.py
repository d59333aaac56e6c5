"""A stand-in for the opentelemetry-api package (see ../README.md)."""
