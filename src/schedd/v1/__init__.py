"""Generated protobuf and gRPC code for the schedd.v1 API (scripts/gen_proto.sh; do not edit)."""
