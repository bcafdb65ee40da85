"""The shared-memory regions clients register, opened, checked, read and written (no requests, no MLServer): the
extension's request side is `wrappers.protocol.shared_tensors`, its registration endpoints `wrappers.transport.shm_endpoints`."""
