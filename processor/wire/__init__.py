"""The gRPC wire contract: stubs generated from schemas/sow.proto (scripts/gen_proto.sh); do not edit."""
