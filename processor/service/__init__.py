"""The gRPC query service (schemas/sow.proto); stubs in ``_generated``."""
