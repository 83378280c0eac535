"""Errors of the schema library."""


class SchemaError(ValueError):
    """An event or file does not match its schema. Never retriable: the same
    bytes will fail the same way, so consumers dead-letter them at once."""

    retriable = False
