"""How runs are planned, merged, sized and warmed, and the event loop polled between them."""
