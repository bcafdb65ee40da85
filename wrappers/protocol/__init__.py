"""The V2 protocol's rules and codecs: what a request may hold, and its tensors in and out."""
