"""The worker: runs student code inside the sandbox and answers the trusted grader.

It never decides a score. It loads the student's code into one namespace per source
(notebook or .py), then serves requests: call a function, build a module, run a
method, read or set a module's weights. Everything it sends back is plain data;
objects that are not (modules, ...) stay here and are named by a handle.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import linecache
import sys
import time
import traceback
import types

import torch
import torch.nn as nn
from torch.nn.attention import flex_attention as flex

from . import borrowed, compiled, protocol, standins, wire
from .meter import LiveMemoryMeter
from .names import STUDENT_PREFIX
from .watch import ForbiddenCallWatch

PREAMBLE = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
STUDENT_FILE = STUDENT_PREFIX + "{label}>"
STUDENT_MODULE = "__student__"  # the __name__ of student code: never "__main__"
MAX_CAPTURED_OUTPUT = 4000


M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
MMAP_THRESHOLD = 128 * 2**10


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def steady_heap() -> None:
    """Make resident memory follow live memory, so that the grader's outside count of it is exact:
    blocks of 128 KiB and more (every tensor that matters) get their own mapping, returned to the
    kernel when freed. glibc otherwise raises this threshold after each large free and serves later
    tensors from a heap that keeps freed pages, which made the count vary between 1x and 4.5x
    the live tensor bytes. Setting it fixes the threshold (mallopt turns the adaptive rule off)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def release_free_heap() -> None:
    """Hand freed heap memory back to the kernel (glibc malloc_trim) before a measured call."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)  # (not glibc: the resident figure may then read low, never high)


def student_module() -> dict:
    """A fresh namespace for one source of student code: the dict of a module registered in sys.modules
    as STUDENT_MODULE. torch.compile, and flex_attention even in eager mode, trace a function with dynamo,
    which imports the module named by its __module__: a plain dict's functions would fail there with
    ModuleNotFoundError. Every source gets its own module under that one name (dynamo reads a function's
    globals from the function itself; the import only has to succeed)."""
    module = types.ModuleType(STUDENT_MODULE)
    sys.modules[STUDENT_MODULE] = module
    ns = module.__dict__
    ns["__builtins__"] = __builtins__
    return ns


class Worker:
    def __init__(self, sock) -> None:
        self.sock = sock
        self.namespaces: dict[str, dict] = {}
        self.own: dict[str, dict] = {}  # namespace -> the student's own versions of the borrowed names (handle_lend)
        self.ask = borrowed.asker(sock)
        self.codec = wire.WorkerCodec()
        self.objects = self.codec.objects  # what the trusted side names by a handle
        self.watch = ForbiddenCallWatch()
        standins.use_originals(self.watch.original)
        standins.use_asker(self.ask)  # (the serving checks' remote cache asks the trusted side for its bookkeeping)
        # FlexAttention untraced (its debugging mode: the mods run under vmap, not dynamo): the same numbers,
        # without seconds of tracing for each new mod. Graded code never needs the traced path (the flex part's
        # functions return mods); standins.flex_attend(traced=True) still takes it.
        flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
        compiled.install(torch)  # a student's torch.compile runs the same code eagerly (compiled.py)
        steady_heap()

    # ------------------------------------------------------------ requests
    def load(self, sources):
        """Exec each source's cells in its own namespace; a failing cell does not stop the rest. Each source comes
        with the number a student finds each cell by (its place in the notebook), used in tracebacks and reports."""
        report = {}
        for name, cells, numbers in sources:
            ns = student_module()
            exec(compile(PREAMBLE, "<preamble>", "exec"), ns)
            errors = []
            for code, number in zip(cells, numbers):
                label = name if len(cells) == 1 else f"{name} cell {number}"
                filename = STUDENT_FILE.format(label=label)
                linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
                try:
                    with self.capture():
                        exec(compile(code, filename, "exec"), ns)
                except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: student code
                    errors.append({"cell": number, **self.describe_error(exc)})
            self.namespaces[name] = ns
            defined = sorted(k for k, v in ns.items() if not k.startswith("__") and (callable(v) or isinstance(v, type)))
            report[name] = {"defined": defined, "errors": errors}
        return report

    def lookup(self, ns_name: str, name: str):
        ns = self.namespaces[ns_name]
        if name not in ns:
            raise NameError(f"name {name!r} is not defined")
        return ns[name]

    def object_of(self, req):
        """The object a request is about: a handle's number, or {"__result__": i} in a batched job."""
        ref = req["object"]
        return self.objects[ref] if type(ref) is int else self.codec.decode(ref)

    def handle_call(self, req):
        if "object" in req:
            target = self.object_of(req)
            if req["target"] != "__call__":
                target = getattr(target, req["target"])
        elif req.get("builtin"):
            target = getattr(standins, req["target"])
        else:
            target = self.lookup(req["ns"], req["target"])
        args = self.codec.decode(req.get("args", []))
        kwargs = self.codec.decode(req.get("kwargs", {}))
        seed = req.get("seed")
        if seed is not None:  # the CPU generator, all the worker uses: torch.manual_seed also queues a seed for
            torch.default_generator.manual_seed(seed)  # each accelerator not started, 0.1 ms with a stack each
        if req.get("measure"):
            release_free_heap()
        meter = LiveMemoryMeter() if req.get("measure") else contextlib.nullcontext()
        with meter, torch.no_grad() if req.get("no_grad", True) else contextlib.nullcontext(), self.watch.watching():
            value = target if req.get("fetch") else target(*args, **kwargs)  # fetch: the object itself
        self.codec.results[-1] = value  # what later steps of a batched job may refer to
        result = {"value": self.codec.encode(value)}
        if req.get("measure"):
            result["peak_bytes"] = meter.peak_bytes
        return result

    def handle_lend(self, req):
        """Put stand-ins for other parts' functions (`req["standins"]`) in the namespace `req["ns"]`, and the
        student's own versions of the other names of `req["names"]` back: a stand-in's every call is answered by the
        trusted side (borrowed.py), so that a mistake in a piece is charged only in the part that owns it, and no
        code of the grader is ever here. The reply names the stand-ins that replaced a function of the student."""
        lent = {name: borrowed.standin(name, self.ask) for name in req.get("standins", ())}
        own = self.own.setdefault(req["ns"], {})
        return {"value": borrowed.lend(self.namespaces[req["ns"]], own, req["names"], lent)}

    def handle_describe(self, req):
        obj = self.object_of(req)
        info = {"type": type(obj).__name__, "is_module": isinstance(obj, nn.Module), "attrs": {}, "children": {}}
        for key, val in vars(obj).items():
            if not key.startswith("_") and type(val) in (int, float, bool, str, type(None)):
                info["attrs"][key] = val
        if isinstance(obj, nn.Module):
            info["training"] = obj.training
            for child_name, child in obj.named_children():
                entry = {"type": type(child).__name__}
                if isinstance(child, nn.Linear):
                    entry.update(in_features=child.in_features, out_features=child.out_features,
                                 bias=child.bias is not None)
                if isinstance(child, nn.Dropout):
                    entry.update(p=float(child.p))
                info["children"][child_name] = entry
            info["parameters"] = {k: list(p.shape) for k, p in obj.named_parameters()}
        return {"value": info}

    def handle_state(self, req):
        obj = self.object_of(req)
        if "load" in req:
            state = self.codec.decode(req["load"])
            with self.watch.watching():
                obj.load_state_dict(state, strict=req.get("strict", True))
            return {"value": None}
        with self.watch.watching():
            state = obj.state_dict()
        return {"value": {k: self.codec.encode(v) for k, v in state.items()}}

    def handle_train(self, req):
        with self.watch.watching():
            self.object_of(req).train(req["mode"])
        return {"value": None}

    def handle_device_call(self, req):
        """Run a student function on `req["device"]` (the GPU stage) and reply with only what is graded.

        Tensor arguments arrive on the CPU and are moved to the device here (after fork: the
        zygote never touches CUDA). The reply holds the output's query rows `req["rows"]`
        (dim -2), its shape/dtype/device, the peak of extra device memory while the function
        ran (CUDA: max_memory_allocated after reset_peak_memory_stats, minus what the inputs
        held; CPU: the live-tensor meter) and the wall time. An out-of-memory error is a
        result ("oom"), not a failure of the worker.
        """
        target = self.lookup(req["ns"], req["target"])
        device = torch.device(req["device"])
        cuda = device.type == "cuda"

        def move(x):
            return x.to(device) if isinstance(x, torch.Tensor) else x

        args = [move(a) for a in self.codec.decode(req.get("args", []))]
        kwargs = {k: move(v) for k, v in self.codec.decode(req.get("kwargs", {})).items()}
        rows = self.codec.decode(req["rows"])
        value, oom, base = None, None, 0
        meter = contextlib.nullcontext() if cuda else LiveMemoryMeter()
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        started = time.perf_counter()
        try:
            with meter, torch.no_grad(), self.watch.watching():
                value = target(*args, **kwargs)
                if cuda:
                    torch.cuda.synchronize(device)
        except torch.cuda.OutOfMemoryError as exc:
            oom = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "out of memory"
        seconds = time.perf_counter() - started
        peak = torch.cuda.max_memory_allocated(device) - base if cuda else meter.peak_bytes
        info = {"peak_bytes": int(peak), "seconds": float(seconds), "oom": oom, "type": type(value).__name__,
                "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
                "device_bytes": int(torch.cuda.get_device_properties(device).total_memory) if cuda else 0}
        if isinstance(value, torch.Tensor):
            info.update(shape=list(value.shape), dtype=str(value.dtype).removeprefix("torch."),
                        device=str(value.device))
            if value.dim() >= 2 and len(rows) and value.shape[-2] > int(rows.max()):
                info["rows"] = self.codec.encode(value.detach().index_select(-2, rows.to(value.device)))
        value = args = kwargs = None
        if cuda:
            torch.cuda.empty_cache()
        return {"value": info}

    # ------------------------------------------------------------ plumbing
    @contextlib.contextmanager
    def capture(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            yield out

    @staticmethod
    def describe_error(exc: BaseException) -> dict:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(STUDENT_PREFIX)]
        where = ""
        if frames:
            last = frames[-1]
            where = f"{last.filename[9:-1]}, line {last.lineno} in {last.name}"
            if last.line:
                where += f": {last.line.strip()}"
        if isinstance(exc, SyntaxError) and exc.filename and exc.filename.startswith(STUDENT_PREFIX):
            where = f"{exc.filename[9:-1]}, line {exc.lineno}: {(exc.text or '').strip()}"
        message = str(exc) if not isinstance(exc, SystemExit) else f"exit code {exc.code!r}"
        return {"type": type(exc).__name__, "message": message[:500], "where": where[:300]}

    def answer(self, req) -> dict:
        """One request's reply (never raises): its value or the error, with what it printed, the
        forbidden calls it made and its duration."""
        handlers = {"call": self.handle_call, "describe": self.handle_describe, "state": self.handle_state,
                    "train": self.handle_train, "device_call": self.handle_device_call, "lend": self.handle_lend}
        started = time.perf_counter()
        self.watch.clear()
        self.codec.results.append(None)
        with self.capture() as out:
            try:
                if req.get("kind") == "load":
                    reply = {"value": self.load(req["sources"])}
                else:
                    reply = handlers[req.get("kind")](req)
                reply["ok"] = True
            except BaseException as exc:  # noqa: BLE001 - everything the student raises is reported
                reply = {"ok": False, "error": self.describe_error(exc)}
        reply["stdout"] = out.getvalue()[:MAX_CAPTURED_OUTPUT]
        reply["forbidden"] = sorted(self.watch.used)
        reply["callers"] = sorted([caller, label] for caller, label in self.watch.calls)  # who called what
        reply["seconds"] = time.perf_counter() - started
        return reply

    def send(self, reply: dict) -> bool:
        """Send a reply; one that cannot be encoded becomes an error reply. True if it went out as is."""
        try:
            protocol.send(self.sock, reply)
            return True
        except Exception as exc:  # noqa: BLE001 - an unencodable reply: say so instead of dying
            protocol.send(self.sock, {"ok": False, "error": {"type": type(exc).__name__,
                                                             "message": f"could not send the result back: {exc}"[:300],
                                                             "where": ""}, "stdout": "", "forbidden": [], "seconds": 0.0})
            return False

    def run_batch(self, jobs) -> None:
        """Several checks' requests in one round trip: each job's steps in order, one reply per step
        as soon as it is done; a job stops at its first failing step, as the check would have.
        A step names an earlier step's result of its job by {"__result__": index}."""
        for steps in jobs:
            self.codec.results = []
            for step in steps:
                reply = self.answer(step)
                if not (self.send(reply) and reply["ok"]):
                    break
        self.codec.results = []

    def serve(self) -> None:
        while True:
            try:
                req = protocol.recv(self.sock, capped=False)  # (the grader's requests: a load carries the code)
            except EOFError:
                return
            kind = req.get("kind")
            if kind == "exit":
                return
            if kind == "batch":
                self.run_batch(req["jobs"])
            else:
                self.codec.results = []
                self.send(self.answer(req))
