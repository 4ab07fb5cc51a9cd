"""The task brief: everything the model is told about a request before its first turn.

Built once per task by the worker (``runtime.executor.brief``) from what the adapters fetch
through the ``BriefSource`` port, rendered within a size bound, and stored as one transcript
item, so a crash never rebuilds it differently.
"""
