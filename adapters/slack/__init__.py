"""slack adapter."""
