"""The gRPC query service (schemas/sow.proto): servicers, sessions, health."""
