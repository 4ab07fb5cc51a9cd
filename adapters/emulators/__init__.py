"""emulators adapter."""
