"""Keel's core: storage, scheduler, executor, models, tools, evidence and reporting."""
