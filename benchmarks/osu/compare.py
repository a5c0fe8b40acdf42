#!/usr/bin/env python3
"""Interleaved comparison of the store backend with raw MPI in one launch.

Runs each benchmark once per world size with `--backend store,raw-mpi`
(both measured in the same processes, same binding, interleaved per size),
then prints each table's per-size ratio store/raw-mpi and the median ratio.

  compare.py [--launcher accrun|mpirun|micro] [--np 2,4] [--bench allreduce,bcast,allgather]
             [--bindir BUILD/benchmarks] [-r REPS] [-m MIN:MAX]

  accrun  : accrun -n N --bind-to core BINDIR/osu_<bench> --backend store,raw-mpi   (default)
  mpirun  : mpirun --bind-to core -n N BINDIR/store_micro <bench> --backend store,raw-mpi
  micro   : same as mpirun (store_micro under mpirun, no accrun needed)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def run(cmd, timeout):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, "hang (timed out after %d s)" % timeout
    if p.returncode != 0:
        return None, "exit %d: %s" % (p.returncode, p.stderr.strip()[-400:])
    return p.stdout, None


def parse_ratios(out):
    """Rows of the '# ratio' table: (size, ratio of the first backend)."""
    rows, in_ratio = [], False
    for line in out.splitlines():
        if line.startswith("# ratio"):
            in_ratio = True
            continue
        if line.startswith("# difference"):
            break
        if in_ratio and not line.startswith("#"):
            f = line.split()
            if len(f) >= 2 and re.match(r"^\d+$", f[0]):
                rows.append((int(f[0]), float(f[1])))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launcher", default="accrun", choices=["accrun", "mpirun", "micro"])
    ap.add_argument("--np", default="2,4")
    ap.add_argument("--bench", default="allreduce,bcast,allgather")
    ap.add_argument("--bindir", default=os.path.join(os.getcwd(), "benchmarks"))
    ap.add_argument("--accrun", default="accrun")
    ap.add_argument("-r", "--reps", default="5")
    ap.add_argument("-m", "--sizes", default="8:4194304")
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args()

    summary = []
    for n in a.np.split(","):
        for bench in a.bench.split(","):
            common = ["--backend", "store,raw-mpi", "-r", a.reps, "-m", a.sizes]
            if a.launcher == "accrun":
                cmd = [a.accrun, "-n", n, "--bind-to", "core", os.path.join(a.bindir, "osu_" + bench)] + common
            else:
                # More ranks than cores: mpirun refuses plain core binding.
                bind = "core" if int(n) <= (os.cpu_count() or 1) else "core:overload-allowed"
                cmd = ["mpirun", "--oversubscribe", "--bind-to", bind, "-n", n,
                       os.path.join(a.bindir, "store_micro"), bench] + common
            out, err = run(cmd, a.timeout)
            print("## %s, %s ranks: %s" % (bench, n, " ".join(cmd)))
            if err:
                print("   " + err)
                summary.append((bench, n, None))
                continue
            print(out.rstrip())
            rows = parse_ratios(out)
            med = statistics.median(r for _, r in rows) if rows else None
            summary.append((bench, n, med))
    print("\n# median ratio store / raw-mpi (target <= 1.2)")
    print("# %-16s %5s %10s" % ("bench", "ranks", "median"))
    worst = 0.0
    for bench, n, med in summary:
        print("  %-16s %5s %10s" % (bench, n, "%.3f" % med if med is not None else "failed"))
        if med is not None:
            worst = max(worst, med)
    return 0 if all(m is not None for _, _, m in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
