"""What an operator reads: metrics, JSON logs, payload events, refusals, and memory kept out of the collector."""
