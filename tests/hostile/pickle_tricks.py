"""Objects that would run code when unpickled, tensor subclasses, absurd outputs, and raw
messages forged on the worker's socket. The grader reads replies with
torch.load(weights_only=True): nothing runs in the trusted process."""
import gc
import os
import socket
import torch.serialization

MARKER = "/tmp/autograder-hostile-PWNED"


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


class Sneaky(torch.Tensor):
    pass


def scaled_scores(Q, K):  # a tensor subclass that always claims equality
    out = torch.zeros(*Q.shape[:-1], K.shape[-2]).as_subclass(Sneaky)
    return out


def attention_weights(scores):  # absurd size: more elements than any answer needs (a 64 MB message)
    return torch.zeros(2**26 + 1, dtype=torch.int8)


def attend(weights, V):  # forge a raw reply whose unpickling would run a command
    import io, struct
    buf = io.BytesIO()
    torch.serialization.torch.save({"ok": True, "value": Evil()}, buf)
    data = buf.getvalue()
    for obj in gc.get_objects():
        if isinstance(obj, socket.socket) and obj.fileno() >= 0:
            obj.sendall(struct.pack("!Q", len(data)) + data)
    return Evil()


def padding_mask(lengths, seq_len):  # a huge view that only materialises when sent
    return torch.zeros(1, dtype=torch.bool).expand(2**40)


def causal_mask(seq_len):  # deeply nested lists
    x = []
    for _ in range(100000):
        x = [x]
    return x
