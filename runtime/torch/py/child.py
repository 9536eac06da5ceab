# kelpie's Python side of a torch worker (docs/torch.md). The Go worker runs
# it as `python3 -c <this file> MODE SCRIPT ...` and drives it step by step;
# it computes forward and backward passes of the user's module and nothing
# else. Parameters and gradients live in shared memory the Go worker maps too:
# the module's parameters are tensor views of it, and gradients are written
# into it, so no tensor crosses between the processes. Only the small JSON
# control messages below travel, on two pipes (fd 3 in, fd 4 out).
#
# Modes:
#   probe SCRIPT SEED        print the module's tensors and the data sets'
#                            sizes as one JSON line on fd 4, then exit
#   serve SCRIPT SEED THREADS  answer requests until fd 3 closes
#   zygote SCRIPT SEED THREADS NAME OWNER
#                            load the script, build the module and the data
#                            sets once, then fork a serving child for each
#                            worker that asks on the abstract Unix socket
#                            NAME (a restarted worker then starts in
#                            milliseconds, not seconds); exit when the
#                            process OWNER (the node's agent) ends
#
# Standard library, torch and numpy only: nodes need nothing else installed.
import faulthandler
import importlib.util
import inspect
import json
import math
import mmap
import os
import signal
import sys
import time
import traceback

faulthandler.enable()

# kelpie job stacks: the worker sends SIGUSR1 and reads every thread's
# frames from the file on fd KELPIE_STACKS_FD (opened for appending by the
# worker). faulthandler dumps from its C signal handler, so a child stuck
# in a step (or in torch's C++) still answers.
if os.environ.get("KELPIE_STACKS_FD"):
    _stacks_file = os.fdopen(int(os.environ["KELPIE_STACKS_FD"]), "w", closefd=False)
    faulthandler.register(signal.SIGUSR1, file=_stacks_file, all_threads=True, chain=False)


class ScriptError(Exception):
    """An error in the user's script, with where it happened."""


def fail(msg):
    raise ScriptError(msg)


def where(script, exc=None):
    """The last traceback line inside the user's script (file:line: code),
    of exc or else of the exception being handled."""
    tb = traceback.extract_tb(exc.__traceback__ if exc is not None else sys.exc_info()[2])
    for fr in reversed(tb):
        if os.path.abspath(fr.filename) == os.path.abspath(script):
            return "%s:%d: %s" % (script, fr.lineno, (fr.line or "").strip())
    if tb:
        fr = tb[-1]
        return "%s:%d" % (fr.filename, fr.lineno)
    return script


def precheck(script):
    """Names a missing model(), train_set() or test_set() before torch is
    imported (which takes seconds): only what the script's top level
    defines, assigns or imports is known here; a star import skips it."""
    import ast
    try:
        with open(script) as f:
            tree = ast.parse(f.read(), script)
    except SyntaxError as e:
        return "%s:%s: syntax error: %s" % (script, e.lineno, e.msg)
    except OSError as e:
        return "%s: %s" % (script, e)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name == "*":
                    return None
                names.add((a.asname or a.name).split(".")[0])
        else:
            for sub in ast.walk(node):  # assignments, also under if/try
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
                elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(sub.name)
    for name in ("model", "train_set", "test_set"):
        if name not in names:
            return "%s: the script defines no function %s() (a torch script defines model(), train_set() and test_set())" % (script, name)
    return None


if len(sys.argv) > 2:
    _msg = precheck(sys.argv[2])
    if _msg:
        with os.fdopen(4, "w") as _w:
            _w.write(json.dumps({"error": _msg}) + "\n")
        sys.exit(2)

try:
    import torch
    import torch.nn as nn
    import numpy  # noqa: F401  (the scripts' usual companion; checked here so its absence is named)
except ImportError as e:  # the Go side recognises this and names the package
    sys.stderr.write("kelpie-torch: missing-module %s\n" % (e.name or e))
    sys.exit(3)


def load(script):
    spec = importlib.util.spec_from_file_location("kelpie_user_script", script)
    if spec is None:
        fail("%s: not a Python file" % script)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        fail("%s: loading the script failed: %s: %s (at %s)" % (script, type(e).__name__, e, where(script)))
    for name in ("model", "train_set", "test_set"):
        if not callable(getattr(mod, name, None)):
            fail("%s: the script defines no function %s() (a torch script defines model(), train_set() and test_set())" % (script, name))
    return mod


def call(script, mod, name, *args):
    try:
        return getattr(mod, name)(*args)
    except Exception as e:
        fail("%s: %s() failed: %s: %s (at %s)" % (script, name, type(e).__name__, e, where(script)))


def is_sparse_module(m):
    return isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse


def build(script, mod, seed):
    """The user's module, with sparse embedding tables created on the meta
    device: their rows live on the servers and only the rows a batch touches
    are ever materialised (a 2^24-row table is never allocated here)."""
    torch.manual_seed(seed)
    originals = {}
    for cls in (nn.Embedding, nn.EmbeddingBag):
        orig = cls.__init__
        originals[cls] = orig
        sig = inspect.signature(orig)

        def init(self, *a, _orig=orig, _sig=sig, **kw):
            bound = _sig.bind(self, *a, **kw)
            if bound.arguments.get("sparse", False) and bound.arguments.get("_weight") is None:
                kw["device"] = "meta"
            _orig(self, *a, **kw)

        cls.__init__ = init
    try:
        m = call(script, mod, "model")
    finally:
        for cls, orig in originals.items():
            cls.__init__ = orig
    if not isinstance(m, nn.Module):
        fail("%s: model() returned %s, not a torch.nn.Module" % (script, type(m).__name__))
    return m


def tensors(m):
    """kelpie's tensor list: dense parameters by name (rows = first dimension,
    cols = the rest folded), and at most one sparse embedding table."""
    sparse = {id(mm.weight) for mm in m.modules() if is_sparse_module(mm)}
    out = []
    for name, p in m.named_parameters():
        if not p.requires_grad:
            continue
        shape = list(p.shape)
        rows = shape[0] if shape else 1
        cols = int(math.prod(shape[1:])) if len(shape) > 1 else 1
        if not shape or len(shape) == 1:
            rows, cols = 1, (shape[0] if shape else 1)
        out.append({"name": name, "rows": rows, "cols": cols, "sparse": id(p) in sparse})
    if sum(t["sparse"] for t in out) > 1:
        fail("kelpie supports one sparse embedding table per model; this one has %d" % sum(t["sparse"] for t in out))
    return out


def datasets(script, mod):
    train = call(script, mod, "train_set")
    test = call(script, mod, "test_set")
    for name, ds in (("train_set", train), ("test_set", test)):
        if not hasattr(ds, "__getitem__") or not hasattr(ds, "__len__"):
            fail("%s: %s() returned %s, not a map-style torch.utils.data.Dataset (it needs __getitem__ and __len__)"
                 % (script, name, type(ds).__name__))
        if len(ds) == 0:
            fail("%s: %s() returned an empty data set" % (script, name))
    return train, test


def accuracy(output, target):
    if output.dim() == 1 or output.shape[-1] == 1:
        pred = (output.reshape(-1) > 0).long()
    else:
        pred = output.argmax(dim=-1)
    return (pred == target.reshape(pred.shape)).float().mean()


class CollateError(Exception):
    """The script's collate failed (args[0] is its exception)."""


class Stop(Exception):
    """Ends the forward pass once the sparse table's ids are known."""


class Child:
    def __init__(self, script, seed, threads):
        self.script = script
        self.mod = load(script)
        self.model = build(script, self.mod, seed)
        self.tensors = tensors(self.model)
        self.train, self.test = datasets(script, self.mod)
        self.collate = getattr(self.mod, "collate", None)
        self.default_collate = self.collate is None
        if self.collate is None:
            from torch.utils.data.dataloader import default_collate
            self.collate = default_collate
        self.loss = getattr(self.mod, "loss", None) or nn.functional.cross_entropy
        self.metric = getattr(self.mod, "metric", None) or accuracy
        torch.set_num_threads(threads)
        params = dict(self.model.named_parameters())
        self.params = [params[t["name"]] for t in self.tensors]
        self.dense = [i for i, t in enumerate(self.tensors) if not t["sparse"]]
        self.sparse = next((i for i, t in enumerate(self.tensors) if t["sparse"]), None)
        self.emb = None
        if self.sparse is not None:
            self.emb = next(mm for mm in self.model.modules() if is_sparse_module(mm) and mm.weight is self.params[self.sparse])
            self.emb.register_forward_pre_hook(self.remap)
        self.init = [p.detach().clone() if i in self.dense else None for i, p in enumerate(self.params)]
        self.capture = False
        self.keys = None  # torch.int64, sorted: the rows mapped for this step
        self.cache = {}   # (set, indices) -> [collated batch, its keys]
        self.dmap = self.smap = None
        self.training = None  # the module's mode, switched only when it changes
        self.trace = os.environ.get("KELPIE_TORCH_TRACE")
        self.prep_seconds = 0.0  # spent preparing batches since the last step
        self.collated = False  # batch() collated (the batch was not ready)

    # --- the sparse table ------------------------------------------------
    def remap(self, module, args):
        ids = args[0]
        if self.capture:
            raise Stop(torch.unique(ids.reshape(-1)))
        local = torch.searchsorted(self.keys, ids.to(torch.int64))
        return (local,) + tuple(args[1:])

    # --- shared memory ---------------------------------------------------
    def map_dense(self, path, floats):
        f = open(path, "r+b")
        self.dmap = mmap.mmap(f.fileno(), floats * 4 * 2)
        f.close()
        off = 0
        self.pviews, self.gviews = {}, {}
        for i in self.dense:
            p = self.params[i]
            n = p.numel()
            self.pviews[i] = torch.frombuffer(self.dmap, dtype=torch.float32, count=n, offset=off * 4).view(p.shape)
            self.gviews[i] = torch.frombuffer(self.dmap, dtype=torch.float32, count=n, offset=(floats + off) * 4).view(p.shape)
            off += n
        with torch.no_grad():
            for i in self.dense:
                self.params[i].data = self.pviews[i]  # the module computes on the shared values

    def map_sparse(self, path, rows):
        dim = self.tensors[self.sparse]["cols"]
        f = open(path, "r+b")
        mm = mmap.mmap(f.fileno(), rows * (dim * 4 * 2 + 8))
        f.close()
        self.smap, self.srows = mm, rows
        self.rview = torch.frombuffer(mm, dtype=torch.float32, count=rows * dim).view(rows, dim)
        self.sgview = torch.frombuffer(mm, dtype=torch.float32, count=rows * dim, offset=rows * dim * 4).view(rows, dim)
        self.kview = torch.frombuffer(mm, dtype=torch.int64, count=rows, offset=rows * dim * 8)

    # --- requests ----------------------------------------------------------
    def batched(self, ds):
        """Whether fetch indexes ds with a whole batch at once (a batch then
        costs microseconds, and preparing it ahead gains nothing)."""
        return self.default_collate and isinstance(ds, torch.utils.data.TensorDataset)

    def fetch(self, ds, idx):
        """The collated batch of samples idx of ds. A TensorDataset under the
        default collate is indexed once with the whole list (the same
        tensors default_collate stacks, without a Python call per sample);
        a dataset with __getitems__ (torch's batched-fetch protocol) is asked
        for all samples at once; any other, one __getitem__ per sample."""
        if self.batched(ds):
            at = torch.as_tensor(idx, dtype=torch.int64)
            return tuple(t[at] for t in ds.tensors)
        getitems = getattr(ds, "__getitems__", None)
        samples = getitems(list(idx)) if getitems is not None else [ds[i] for i in idx]
        try:
            return self.collate(samples)
        except Exception as e:
            raise CollateError(e)

    def batch(self, which, idx):
        key = (which, tuple(idx))
        hit = self.cache.get(key)
        if hit is None:
            ds = self.train if which == "train" else self.test
            self.collated = True
            try:
                b = self.fetch(ds, idx)
            except CollateError as ce:
                e = ce.args[0]
                fail("%s: collate failed: %s: %s (at %s)" % (self.script, type(e).__name__, e, where(self.script, e)))
            except Exception as e:
                fail("%s: %s()[i] failed: %s: %s (at %s)" % (self.script, which + "_set", type(e).__name__, e, where(self.script)))
            if not isinstance(b, (tuple, list)) or len(b) != 2:
                fail("%s: a collated batch must be (input, target), got %s" % (self.script, type(b).__name__))
            hit = [b, None]
            if len(self.cache) >= 4:
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = hit
        return hit

    def prepare(self, which, idx):
        """Collates a batch ahead of its step (the worker sends its indices
        while it pushes and pulls). No reply: a failure is reported by the
        step, which collates the batch again."""
        t0 = time.perf_counter()
        try:
            self.batch(which, idx)
        except Exception:
            pass
        self.prep_seconds += time.perf_counter() - t0

    def forward(self, inp):
        if isinstance(inp, (tuple, list)):
            return self.model(*inp)
        return self.model(inp)

    def sparse_keys(self, which, idx):
        hit = self.batch(which, idx)
        if hit[1] is None:
            self.capture = True
            try:
                with torch.no_grad():
                    self.forward(hit[0][0])
                fail("%s: the sparse embedding table was not used in the forward pass" % self.script)
            except Stop as s:
                hit[1] = s.args[0]
            finally:
                self.capture = False
        keys = hit[1]
        n = keys.numel()
        if self.smap is not None and n <= self.srows:
            self.kview[:n].copy_(keys)
        return n

    def use_rows(self, n):
        """Points the embedding at the n rows the worker pulled (keys in the
        keys region, values in the rows region)."""
        self.keys = self.kview[:n]
        self.emb._parameters["weight"] = nn.Parameter(self.rview[:n])

    def mode(self, training):
        if self.training is not training:
            self.model.train(training)
            self.training = training

    def step(self, idx, nrows, scale):
        t0 = time.perf_counter()
        self.collated = False
        (inp, target), _ = self.batch("train", idx)
        t1 = time.perf_counter() if self.collated else t0  # data: 0 for a batch prepared ahead
        if self.emb is not None:
            self.use_rows(nrows)
        self.mode(True)
        for i in self.dense:
            self.params[i].grad = None
        out = self.forward(inp)
        loss = self.loss(out, target)
        lv = float(loss.detach())
        prep, self.prep_seconds = self.prep_seconds, 0.0
        if not math.isfinite(lv):
            return {"loss": lv, "n": len(idx), "seconds": time.perf_counter() - t0, "data": t1 - t0, "prep": prep}
        loss.backward()
        with torch.no_grad():
            for i in self.dense:
                g = self.params[i].grad
                if g is None:
                    self.gviews[i].zero_()
                else:
                    torch.mul(g, scale, out=self.gviews[i])
            if self.emb is not None:
                g = self.emb.weight.grad
                rows = self.sgview[:nrows]
                rows.zero_()
                if g is not None:
                    if g.is_sparse:
                        g = g.coalesce()
                        rows.index_add_(0, g.indices()[0], g.values() * scale)
                    else:
                        torch.mul(g, scale, out=rows)
        if self.trace:
            with open(self.trace, "a") as f:
                f.write("step %d %d\n" % (os.getpid(), len(target)))
        return {"loss": lv, "n": len(target), "seconds": time.perf_counter() - t0, "data": t1 - t0, "prep": prep}

    def evaluate(self, which, idx, nrows):
        (inp, target), _ = self.batch(which, idx)
        if self.emb is not None:
            self.use_rows(nrows)
        self.mode(False)
        with torch.no_grad():
            out = self.forward(inp)
            return {"loss": float(self.loss(out, target)), "metric": float(self.metric(out, target)), "n": len(target)}

    def initial(self):
        with torch.no_grad():
            for i in self.dense:
                self.pviews[i].copy_(self.init[i])
        return {}


def serve(child, rd, wr, warm=False):
    def send(msg):
        wr.write(json.dumps(msg) + "\n")
        wr.flush()

    send({"op": "hello", "tensors": child.tensors, "train": len(child.train), "test": len(child.test), "pid": os.getpid(),
          "batched": child.batched(child.train), "warm": warm, "zygote": os.getppid() if warm else 0})
    for line in rd:
        t_in = time.time_ns()
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "map":
                if req.get("dense"):
                    child.map_dense(req["dense"], req["floats"])
                if req.get("sparse"):
                    child.map_sparse(req["sparse"], req["rows"])
                send({})
            elif op == "init":
                send(child.initial())
            elif op == "keys":
                send({"n": child.sparse_keys(req["set"], req["idx"])})
            elif op == "prep":
                child.prepare(req["set"], req["idx"])  # no reply
            elif op == "step":
                r = child.step(req["idx"], req.get("rows", 0), req["scale"])
                r["t_in"] = t_in  # when the request was read, and the reply
                r["t_out"] = time.time_ns()  # written: the pipes' latency
                send(r)
            elif op == "eval":
                send(child.evaluate(req["set"], req["idx"], req.get("rows", 0)))
            elif op == "exit":
                return
            else:
                send({"error": "unknown request %r" % op})
        except ScriptError as e:
            send({"error": str(e)})
        except Exception as e:
            send({"error": "%s: %s: %s (at %s)" % (child.script, type(e).__name__, e, where(child.script)),
                  "traceback": traceback.format_exc()})


def parent_of(pid):
    """The parent process id of pid (0 when it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def die_with(pid):
    """Ends this process as soon as process pid ends (a pidfd becomes
    readable then): a forked child's parent is the zygote, not its worker,
    so PR_SET_PDEATHSIG cannot tie them."""
    import select
    import threading
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        os._exit(1)

    def wait():
        select.select([fd], [], [])
        os._exit(1)
    threading.Thread(target=wait, daemon=True).start()


def zygote(script, seed, threads, name, owner, wr):
    """Builds the child once and forks it for each worker that asks. A
    request is a connection on the abstract socket name from a process of
    this user that is the owner or the owner's child (the node's agent and
    the roles it starts: SO_PEERCRED, not what the message says); it carries
    three descriptors: the child's request pipe (its fd 3), its reply pipe
    (fd 4) and its output (fds 1 and 2), and a fourth, the file the fork
    dumps its frames to on SIGUSR1 (fd 5, kelpie job stacks). The answer is the forked child's
    pid. The fork serves that worker as a cold child would, and ends with it.
    No thread pool exists before a fork (one thread until then)."""
    import select
    import signal
    import socket
    import struct
    torch.set_num_threads(1)
    child = Child(script, seed, 1)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(16)
    owner_fd = os.pidfd_open(owner)
    wr.write(json.dumps({"op": "ready", "pid": os.getpid()}) + "\n")
    wr.flush()
    wr.close()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2, 3):
        os.dup2(null, fd)
    os.close(null)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    live = set()
    poll = select.poll()
    poll.register(owner_fd, select.POLLIN)
    poll.register(srv.fileno(), select.POLLIN)
    while True:
        for fd, _ in poll.poll(1000):
            if fd == owner_fd:
                for p in live:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
                os._exit(0)
            conn, _ = srv.accept()
            try:
                p = fork_for(conn, child, srv, owner, owner_fd, threads, struct, socket)
                if p:
                    live.add(p)
            except Exception:
                pass
            finally:
                conn.close()
        for p in list(live):  # reap the children that ended
            try:
                done, _ = os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                done = p
            if done:
                live.discard(p)


def fork_for(conn, child, srv, owner, owner_fd, threads, struct, socket):
    """Forks a serving child for the worker on conn (see zygote)."""
    conn.settimeout(5)
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.getuid() or (pid != owner and parent_of(pid) != owner):
        return 0
    _, fds, _, _ = socket.recv_fds(conn, 64, 4)
    if len(fds) not in (3, 4):
        for f in fds:
            os.close(f)
        return 0
    p = os.fork()
    if p == 0:
        try:
            srv.close()
            conn.close()
            os.close(owner_fd)
            import fcntl
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]  # out of the way of 1-4
            for fd in fds:
                os.close(fd)
            for fd, to in zip((high[0], high[1], high[2], high[2]) + tuple(high[3:]), (3, 4, 1, 2, 5)):
                os.dup2(fd, to)
            for fd in high:
                os.close(fd)
            if len(high) == 4:  # the stacks file, as a cold child gets it (KELPIE_STACKS_FD)
                global _stacks_file
                _stacks_file = os.fdopen(5, "w", closefd=False)
                faulthandler.register(signal.SIGUSR1, file=_stacks_file, all_threads=True, chain=False)
            die_with(pid)
            torch.set_num_threads(threads)
            serve(child, os.fdopen(3, "r"), os.fdopen(4, "w"), warm=True)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(0)
    for f in fds:
        os.close(f)
    conn.sendall((json.dumps({"pid": p}) + "\n").encode())
    return p


def main():
    mode, script, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    wr = os.fdopen(4, "w")
    try:
        if mode == "zygote":
            zygote(script, seed, int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), wr)
            return
        if mode == "probe":
            mod = load(script)
            m = build(script, mod, seed)
            ts = tensors(m)
            train, test = datasets(script, mod)
            wr.write(json.dumps({"op": "hello", "tensors": ts, "train": len(train), "test": len(test)}) + "\n")
            wr.flush()
            return
        threads = int(sys.argv[4])
        child = Child(script, seed, threads)
    except ScriptError as e:
        wr.write(json.dumps({"error": str(e)}) + "\n")
        wr.flush()
        sys.exit(2)
    serve(child, os.fdopen(3, "r"), wr)


main()
