"""The model's stages and the checks on the artifact folder."""
