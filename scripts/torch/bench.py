#!/usr/bin/env python3
"""Acceptance 3 and 4 of docs/torch.md, interleaved: each round runs the
built-in Go MLP, the same MLP as a torch script, PyTorch DDP undisturbed and
with rank 1 slowed 3x, and kelpie with worker-1 slowed 3x (AntDT-ND auto),
one after the other, so that a noisy machine weighs on every side alike.
It prints each run as it ends, then the median (min-max) of each side and
of the ratios, with the load average (/proc/loadavg) around every run.

  scripts/torch/bench.py [--rounds 3] [--only go,torch,ddp,ddp-slow,straggler]
                         [--kelpie bin/kelpie] [--mnist data/mnist] [--out FILE]

Run from the repository's top (after `make build data torch`). For the torch
runs it also prints where a worker's step time went, from the workers'
"torch steps" log lines: the Python step (of which collating), the control
round trip (of which the two pipe hops) per step, averaged over workers.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

SIDES = {
    "go": ("kelpie", "examples/mnist-mlp.yaml"),
    "torch": ("kelpie", "examples/torch/mnist_mlp.yaml"),
    "ddp": ("ddp", []),
    "ddp-slow": ("ddp", ["--slow-rank", "1", "--slow-factor", "3"]),
    "straggler": ("kelpie", "examples/torch/mnist_mlp_straggler.yaml"),
}



def seconds(v):
    """A Go duration as slog prints it (1.234s, 12ms, 1m2.5s)."""
    total = 0.0
    for num, unit in re.findall(r"([0-9.]+)(ns|µs|us|ms|s|m|h)", v):
        total += float(num) * {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}[unit]
    return total


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def split(log):
    """Per-step means, over workers, of the fields of "torch steps" lines."""
    rows = []
    for line in log.splitlines():
        if 'msg="torch steps"' not in line:
            continue
        kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
        steps = int(kv.get("steps", "0"))
        if steps == 0:
            continue
        row = {"steps": steps}
        for k in ("python", "data", "control", "to_child", "to_worker", "prep"):
            if k in kv:
                row[k] = seconds(kv[k]) / steps * 1e3  # ms per step
        rows.append(row)
    if not rows:
        return None
    out = {"workers": len(rows)}
    for k in rows[0]:
        if k != "steps":
            out[k + "_ms"] = round(statistics.mean(r.get(k, 0) for r in rows), 3)
    return out


def run(side, a):
    kind, arg = SIDES[side]
    before = load()
    t0 = time.time()
    if kind == "kelpie":
        p = subprocess.run([a.kelpie, "run", "--json", arg], capture_output=True, text=True, timeout=3600)
        res = {}
        try:
            res = json.loads(p.stdout)
        except ValueError:
            pass
        out = {"samples_per_s": res.get("throughput_samples_per_s"), "accuracy": res.get("accuracy"),
               "train_s": res.get("train_seconds"), "exit": p.returncode}
        s = split(p.stderr)
        if s:
            out["step"] = s
        acts = re.findall(r'msg="action \S+ (\w+)[^:"]*: applied', p.stderr)
        if acts:
            out["actions"] = acts
    else:
        p = subprocess.run([a.python, "scripts/torch/ddp_mnist.py", a.mnist, "--workers", "4"] + arg,
                           capture_output=True, text=True, timeout=3600)
        res = {}
        try:
            res = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
        out = {"samples_per_s": res.get("samples_per_s"), "accuracy": res.get("accuracy"),
               "train_s": res.get("job_time_s"), "exit": p.returncode}
    out.update(side=side, load_before=before, load_after=load(), wall_s=round(time.time() - t0, 1))
    return out


def med(xs):
    xs = [x for x in xs if x]
    if not xs:
        return "-"
    return "%.0f (%.0f–%.0f)" % (statistics.median(xs), min(xs), max(xs)) if min(xs) > 10 else \
        "%.2f (%.2f–%.2f)" % (statistics.median(xs), min(xs), max(xs))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default=",".join(SIDES))
    p.add_argument("--kelpie", default="bin/kelpie")
    p.add_argument("--mnist", default="data/mnist")
    p.add_argument("--out", default="")
    p.add_argument("--python", default=os.environ.get("KELPIE_PYTHON") or
                   ("/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable),
                   help="the python3 with torch that DDP runs on (kelpie's children's: $KELPIE_PYTHON, else /usr/bin/python3)")
    a = p.parse_args()
    sides = [s for s in a.only.split(",") if s]
    for s in sides:
        if s not in SIDES:
            sys.exit("unknown side %r (want %s)" % (s, ",".join(SIDES)))
    runs = []
    for r in range(a.rounds):
        for s in sides:
            out = run(s, a)
            out["round"] = r
            runs.append(out)
            print(json.dumps(out), flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(out) + "\n")
    by = {s: [x for x in runs if x["side"] == s] for s in sides}
    print("\nside        samples/s median (min–max)   load before runs")
    for s in sides:
        print("%-11s %-28s %s" % (s, med([x["samples_per_s"] for x in by[s]]), " ".join(x["load_before"] for x in by[s])))

    def ratio(n, d):
        if n in by and d in by:
            rs = [x["samples_per_s"] / y["samples_per_s"] for x, y in zip(by[n], by[d])
                  if x["samples_per_s"] and y["samples_per_s"]]
            print("%s / %s, per round: %s" % (n, d, med(rs)))
    ratio("torch", "go")
    ratio("torch", "ddp")
    ratio("straggler", "ddp-slow")
    steps = [x["step"] for x in by.get("torch", []) if x.get("step")]
    if steps:
        print("torch MLP, ms per step (median over rounds of the workers' mean):")
        for k in steps[0]:
            if k.endswith("_ms"):
                print("  %-12s %s" % (k[:-3], med([st.get(k, 0) for st in steps])))


if __name__ == "__main__":
    main()
