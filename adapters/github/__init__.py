"""github adapter."""
