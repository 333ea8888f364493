#!/bin/bash
# One call on a GPU host with no TVM installed (run from the checkout's root):
#   benchmarks/cuda_device_call.sh BUNDLES OUT [PEER ...]
# BUNDLES holds .tar.xz files made on the tuning machine: batches (`tensortune measure export`,
# each unpacking to batch-*/), whole-model exports (`bench_cuda_e2e.py prepare`, unpacking to
# E/*/) and TVM's trimmed runtime (`bench_cuda_e2e.py runtime`, unpacking to RT/). Each batch is
# timed by the device runner, then the exports against PyTorch; PEER is NAME=SCRIPT, the
# user's-network script whose module is export NAME's PyTorch peer. Everything lands in OUT
# (results per batch, the end-to-end JSON, the log), so that a lease's one call does the job.
# Preparing the bundles for users' networks (about 15 min of builds per 50 tasks on 2 cores):
#   python benchmarks/usernet_swin.py swin.onnx
#   tensortune measure export --model swin.onnx --batch 8 --pool 1.5 --out r1-swin
#   python benchmarks/bench_cuda_e2e.py prepare swin.onnx --out E0/swin   # untuned: dlight
#   python benchmarks/bench_cuda_e2e.py runtime --like E0/swin --python 3.12 --out RT
#   tar -cJf B/batch-r1-swin.tar.xz --transform 's,^r1-swin,batch-r1-swin,' r1-swin
#   tar -cJf B/E0.tar.xz -C E0 --transform 's,^,E/,' swin; tar -cJf B/rt.tar.xz RT
# then, on the GPU host: benchmarks/cuda_device_call.sh B OUT swin=benchmarks/usernet_swin.py
# A network's weights over ~15 MB travel better as a recipe (`prepare --synthetic-weights 1`).
# E2E_ARGS passes more options to `bench_cuda_e2e.py run` (e.g. --no-compile --rounds 5).
set -u
bundles=$1 out=$2
shift 2
work=$(mktemp -d)
for f in "$bundles"/*.tar.xz; do tar -xJf "$f" -C "$work"; done
export PYTHONUNBUFFERED=1
log=$out/log.txt
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  for b in "$work"/batch-*; do
    [ -d "$b" ] || continue
    # a hung batch must not cost the end-to-end timings: each batch has its own limit
    timeout 240 python3 -m tensortune.device_runner "$b"
    cp "$b/results.jsonl" "$out/$(basename "$b").jsonl"
  done
  date -u
  peers=()
  for p in "$@"; do peers+=(--peer-script "$p"); done
  if compgen -G "$work/E/*" >/dev/null; then
    python3 benchmarks/bench_cuda_e2e.py run "$work"/E/* --runtime "$work/RT" "${peers[@]}" \
      --json "$out/e2e.json" ${E2E_ARGS:-}
  fi
  date -u
} 2>&1 | tee "$log"
