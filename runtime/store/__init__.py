"""Durable storage: the schema, the engine factory, migrations and the record types."""
