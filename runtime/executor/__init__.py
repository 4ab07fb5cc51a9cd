"""The executor: one persisted phase per tick, recoverable at every boundary."""
