"""Generated gRPC stubs (scripts/gen_proto.sh); do not edit."""
