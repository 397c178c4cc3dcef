#!/usr/bin/env bash
# The compiled-rung cache in a bucket (--cache-dir s3://rungs/fleet): how
# soon a second `ovrun serve` replica is ready from what the first
# published, against the first (cold: empty bucket, compiles and
# publishes) and a restart with its local tier warm. versitygw (built by
# `make versitygw`) serves a temporary folder on loopback; every replica
# starts with a local tier of its own (--cache-local-dir). Each round
# empties the bucket; 3 rounds, medians. "ready" is serve's own "ready after
# S s" (from listening to the first rung's graph ready: compile or fetch +
# import) and, in brackets, from the process's start (model load included).
# Each configuration runs under flock /tmp/ovrun-bench.lock. Not part of
# `make test`.
# Usage: scripts/bench-rung-bucket.sh [MODEL.gguf] [ladder] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-.venv/SmolLM2-135M-Instruct.Q4_1.gguf}
ladder=${2:-128,256,512,1024}
rounds=${3:-3}
vgw=.cache/bin/versitygw
[ -x "$vgw" ] || make --no-print-directory versitygw
tmp=$(mktemp -d)
bin=$tmp/ovrun
cp bin/ovrun "$bin"
export OVRUN_OPENVINO_LIB=${OVRUN_OPENVINO_LIB:-$PWD/.venv/openvino/libs}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$tmp/s3/rungs"
"$vgw" --port "127.0.0.1:$port" --access bench --secret bench-secret --quiet posix "$tmp/s3" >"$tmp/versitygw.log" 2>&1 &
vgw_pid=$!
trap 'kill $vgw_pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
flock /tmp/ovrun-bench.lock python3 - "$bin" "$model" "$ladder" "$rounds" "$tmp" <<'PY'
import os, re, shutil, statistics, subprocess, sys, time
binary, model, ladder, rounds, tmp = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
bucket = os.path.join(tmp, "s3", "rungs")

def ready(args, local):
    """Starts a replica, returns (serve's ready seconds, seconds from exec), kills it."""
    t0 = time.monotonic()
    p = subprocess.Popen([binary, "serve", "--addr", "127.0.0.1:0", "--model", model, "--ladder", ladder,
                          "--cache-dir", "s3://rungs/fleet", "--cache-local-dir", local, *args],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        for line in p.stderr:
            if "note:" in line:
                print("  " + line.strip(), file=sys.stderr)
            m = re.search(r"ready after ([0-9.]+) s", line)
            if m:
                return float(m.group(1)), time.monotonic() - t0
        raise SystemExit(f"serve exited before it was ready ({p.wait()})")
    finally:
        p.kill()
        p.wait()

def mib(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".blob")) / 2**20

print(f"model {os.path.basename(model)}, ladder {ladder}, {rounds} rounds, medians: serve's ready after (from exec)")
print("| serve | replica 1: cold, compiles and publishes | replica 2: empty local tier, from the bucket | replica 2 restarted: local tier | blobs |")
print("|---|---:|---:|---:|---:|")
for name, args in [("defaults (paged batching)", []), ("--batching off --graph-per-rung", ["--batching", "off", "--graph-per-rung"])]:
    res = {"cold": [], "bucket": [], "local": []}
    for r in range(rounds):
        shutil.rmtree(os.path.join(bucket, "fleet"), ignore_errors=True)
        locals_ = [os.path.join(tmp, f"local-{r}-{i}") for i in (1, 2)]
        res["cold"].append(ready(args, locals_[0]))
        res["bucket"].append(ready(args, locals_[1]))
        res["local"].append(ready(args, locals_[1]))
        blobs = mib(os.path.join(bucket, "fleet"))
        for l in locals_:
            shutil.rmtree(l, ignore_errors=True)
    cell = lambda xs: f"{statistics.median(x[0] for x in xs):.2f} s ({statistics.median(x[1] for x in xs):.2f} s)"
    print(f"| {name} | {cell(res['cold'])} | {cell(res['bucket'])} | {cell(res['local'])} | {blobs:.0f} MiB |")
PY
