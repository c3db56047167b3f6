"""Clients of the query service and of Kafka: gRPC, failover, direct publishing, bookmark stores."""
