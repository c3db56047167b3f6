"""Prometheus metrics and the status a running service reports."""
