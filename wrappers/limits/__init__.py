"""What a request may cost the server: how large a REST body the process admits, what one HTTP connection may
take before its request is whole, and which gRPC calls a draining server still takes. Rules read from the
environment; no server."""
