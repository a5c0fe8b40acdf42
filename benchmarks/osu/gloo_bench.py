#!/usr/bin/env python3
"""gloo_bench.py -- torch.distributed's gloo backend, OSU-style, for comparison
with accrun's store backend on the same hosts and sizes (benchmarks/osu/hosts.sh).

Run one process per rank under accrun, which sets RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT:
    accrun -n 2 -H h1:1,h2:1 python3 gloo_bench.py allreduce -m 8:4194304 -i 1000

Prints "# Size  Avg Latency(us)" as osu_<bench> does (float32 elements; the
average over iterations after warm-up, of the slowest rank; the median of
-r rounds per size, after unrecorded rounds at the first size for at least
a second, as the osu_<bench> harness measures).  Needs python3-torch
(Debian); exits 77 without it.
"""
import argparse
import sys
import time

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("gloo_bench: python3-torch is not installed (apt-get install python3-torch)", file=sys.stderr)
    sys.exit(77)


def sizes(spec):
    lo, hi = (int(x) for x in spec.split(":"))
    s = max(lo, 4)
    while s <= hi:
        yield s
        s *= 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench", choices=["allreduce", "bcast", "allgather"])
    ap.add_argument("-m", default="8:4194304")
    ap.add_argument("-i", type=int, default=1000)
    ap.add_argument("-x", type=int, default=20, help="warm-up iterations")
    ap.add_argument("-r", type=int, default=3, help="rounds per size; the median is printed")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"# gloo {a.bench}, {size} ranks (torch {torch.__version__})")
        print(f"# {'Size':>10} {'Avg Latency(us)':>18}")
    settle = True
    for nbytes in sizes(a.m):
        n = max(1, nbytes // 4)
        t = torch.ones(n, dtype=torch.float32)
        out = [torch.empty(n, dtype=torch.float32) for _ in range(size)]
        iters = a.i if nbytes < (1 << 20) else max(10, a.i // 10)

        def op():
            if a.bench == "allreduce":
                dist.all_reduce(t)
            elif a.bench == "bcast":
                dist.broadcast(t, 0)
            else:
                dist.all_gather(out, t)

        def measure():
            for _ in range(a.x):
                op()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                op()
            us = torch.tensor([(time.perf_counter() - t0) / iters * 1e6], dtype=torch.float64)
            dist.all_reduce(us, op=dist.ReduceOp.MAX)
            return us.item()

        if settle:
            # The first calls after start-up pay for what later ones do
            # not (connections, page faults, the launch's own processes).
            settle = False
            t0 = time.perf_counter()
            while True:
                measure()
                spent = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(spent, op=dist.ReduceOp.MAX)
                if spent.item() >= 1.0:
                    break
        rounds = sorted(measure() for _ in range(max(1, a.r)))
        if rank == 0:
            print(f"  {nbytes:>10} {rounds[len(rounds) // 2]:>18.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
