"""Queries: the read replica, query execution and the publish gateway (transport-free)."""
