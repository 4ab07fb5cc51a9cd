"""``keel demo``: the whole job end to end with no accounts (emulators, SQLite, scripted model)."""
