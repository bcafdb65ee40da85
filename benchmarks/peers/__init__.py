"""`make bench-peers`: Slipway's runtime against KServe and PyTriton, each in its own virtualenv, with one client."""
