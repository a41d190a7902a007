"""The hidden checks of the fifth assignment, serving."""
