#!/usr/bin/env python3
"""What transparent huge pages buy a decode step of an ovrun graph.

Compiles the same graph twice in one process: first with THP disabled for
the process (prctl PR_SET_THP_DISABLE: the plugin's weight memory on 4 KiB
pages), then with it allowed again, so that under
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (what ovrun starts itself with) the
second copy lands on 2 MiB pages. The two then take turns, three decode
steps each, --rounds times, so the machine's swings fall on both alike.
Prints min, first quartile and median ms of each and the ratio of the
medians (above 1: huge pages faster):

  bin/ovrun export-ir --model M --capacity 1024 --attention paged --precision bf16 --shared --prefill-chunk 512 --out /tmp/h
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 .venv/bin/python scripts/huge_pages.py --live 16 --precision bf16 /tmp/h/shared-c1024-t512.xml
"""
import argparse
import ctypes
import os
import statistics

from ovrun_core import new_core, precision_props
from step_time import ovrun_step

PR_SET_THP_DISABLE = 41


def anon_huge_mib():
    with open(f"/proc/{os.getpid()}/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) >> 10
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xml", help="an ovrun export-ir graph")
    ap.add_argument("--live", type=int, default=16, help="tokens already in the cache")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--precision", default="", help="INFERENCE_PRECISION_HINT (default: the device's)")
    a = ap.parse_args()
    if "glibc.malloc.hugetlb=1" not in os.environ.get("GLIBC_TUNABLES", ""):
        raise SystemExit("run under GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (else neither copy gets huge pages)")
    props = dict(precision_props(a.precision), SNIPPETS_MODE="DISABLE")  # as ovrun compiles on the CPU
    libc = ctypes.CDLL(None, use_errno=True)
    core = new_core()
    if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl PR_SET_THP_DISABLE: {os.strerror(ctypes.get_errno())}")
    small = ovrun_step(core, a.xml, a.live, props)
    small()
    before = anon_huge_mib()
    libc.prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0)
    huge = ovrun_step(core, a.xml, a.live, props)
    huge()
    print(f"huge pages: {before} MiB after the 4 KiB copy, {anon_huge_mib()} MiB after the second")
    times = {"4 KiB pages": [], "huge pages": []}
    for _ in range(a.rounds):
        times["4 KiB pages"].extend(small() for _ in range(3))
        times["huge pages"].extend(huge() for _ in range(3))
    for name, t in times.items():
        t.sort()
        print(f"{name:12s} min {1e3 * t[0]:6.1f}  p25 {1e3 * t[len(t) // 4]:6.1f}  median {1e3 * statistics.median(t):6.1f} ms")
    print(f"median 4 KiB / huge: {statistics.median(times['4 KiB pages']) / statistics.median(times['huge pages']):.3f}")


if __name__ == "__main__":
    main()
