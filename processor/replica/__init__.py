"""The read replica: the changelogs applied into an in-memory SOW, with history."""
