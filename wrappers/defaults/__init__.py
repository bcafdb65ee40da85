"""The settings left unset, chosen at load from what the model measures on this container."""
