"""Signals and the policy that gives each one exactly one owner."""
