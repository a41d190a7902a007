"""A function that never returns costs only the part that calls it."""
def attend(weights, V):
    while True:
        pass
