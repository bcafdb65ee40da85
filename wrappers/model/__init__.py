"""The model's stages, the roles served apart, and the checks on the artifact folder."""
