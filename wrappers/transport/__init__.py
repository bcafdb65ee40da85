"""REST and gRPC bodies on their way in and out of MLServer: parsing, limits, fast paths."""
