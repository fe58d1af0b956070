"""Parsers for each source's change-record format, one module per format."""
