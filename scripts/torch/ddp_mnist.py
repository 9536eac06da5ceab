#!/usr/bin/env python3
"""PyTorch DDP (gloo, CPU) baseline for kelpie's examples/mnist-mlp.yaml: the same model, data,
global batch, optimizer and epochs, trained by WORKERS processes that allreduce gradients every step
(synchronous, like kelpie's BSP). Prints one JSON line: samples_per_s, job_time_s, accuracy.

  ddp_mnist.py MNIST_DIR [--workers 4] [--hidden 128] [--epochs 3] [--global-batch 128]
               [--lr 0.05] [--momentum 0.9] [--threads 1] [--slow-rank R --slow-factor 3]

--slow-rank R makes rank R a straggler: after each step's forward and backward it sleeps
(factor-1) times what they took, as kelpie's compute straggler injection does.

Each process's BLAS/OpenMP pools get --threads threads as well, as kelpie's Python children do.
MNIST_DIR holds the four idx .gz files (kelpie's `make data` puts them in data/mnist/).
Needs Debian's python3-torch (1.13) and python3-numpy. Each process uses --threads intra-op threads.
"""
import argparse, gzip, json, os, sys, time
import numpy as np
import torch, torch.distributed as dist, torch.multiprocessing as mp


def load(d):
    def imgs(f):
        b = gzip.open(os.path.join(d, f)).read()
        return np.frombuffer(b, np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255
    def labs(f):
        b = gzip.open(os.path.join(d, f)).read()
        return np.frombuffer(b, np.uint8, offset=8).astype(np.int64)
    return (imgs("train-images-idx3-ubyte.gz"), labs("train-labels-idx1-ubyte.gz"),
            imgs("t10k-images-idx3-ubyte.gz"), labs("t10k-labels-idx1-ubyte.gz"))


def run(rank, a, port, q):
    torch.set_num_threads(a.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.workers)
    X, Y, Xt, Yt = load(a.mnist)
    X, Y = torch.from_numpy(X), torch.from_numpy(Y)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(784, a.hidden), torch.nn.ReLU(), torch.nn.Linear(a.hidden, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    per = a.global_batch // a.workers
    g = torch.Generator().manual_seed(7)
    dist.barrier()
    t0 = time.perf_counter()
    samples = 0
    for _ in range(a.epochs):
        perm = torch.randperm(len(X), generator=g)
        steps = len(X) // a.global_batch
        for s in range(steps):
            idx = perm[s * a.global_batch + rank * per: s * a.global_batch + (rank + 1) * per]
            opt.zero_grad(set_to_none=True)
            c0 = time.perf_counter()
            loss_fn(ddp(X[idx]), Y[idx]).backward()
            if rank == a.slow_rank:
                time.sleep((a.slow_factor - 1) * (time.perf_counter() - c0))
            opt.step()
            samples += per
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        with torch.no_grad():
            acc = (model(torch.from_numpy(Xt)).argmax(1).numpy() == Yt).mean()
        q.put({"samples_per_s": samples * a.workers / dt, "job_time_s": dt, "accuracy": float(acc),
               "workers": a.workers, "torch": torch.__version__})
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mnist"); p.add_argument("--workers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128); p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--global-batch", type=int, default=128); p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9); p.add_argument("--threads", type=int, default=1)
    p.add_argument("--slow-rank", type=int, default=-1); p.add_argument("--slow-factor", type=float, default=3)
    a = p.parse_args()
    # The BLAS and OpenMP pools get --threads too, as kelpie's children do
    # (torch.set_num_threads alone leaves OpenBLAS a thread per core).
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(k, str(a.threads))
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ctx = mp.get_context("spawn"); q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, a, port, q)) for r in range(a.workers)]
    for pr in procs: pr.start()
    res = q.get(timeout=3600)
    for pr in procs: pr.join()
    print(json.dumps(res))
