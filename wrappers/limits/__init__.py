"""What a request may cost the server: how large a REST body the process admits, and what one HTTP connection may
take before its request is whole. Rules read from the environment; no server."""
