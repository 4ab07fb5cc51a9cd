"""web adapter."""
