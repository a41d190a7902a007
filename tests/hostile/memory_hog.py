"""Allocate far more memory than the worker may have."""
def scaled_scores(Q, K):
    return torch.empty(2**40, dtype=torch.uint8).fill_(1)


def attention_weights(scores):
    hoard = []
    while True:
        hoard.append(bytearray(256 * 2**20))


def attend(weights, V):
    return bytearray(64 * 2**30)
