"""The shared-memory extension: regions, their API, and a request's tensors read from them."""
