"""Which GPU each rank takes (``runtime/cuda.device``): run by tests/test_cuda_mpi.py under mpirun
with CUDA_VISIBLE_DEVICES set. Each rank computes one small value on its GPU, then prints
``{"rank": r, "local_rank": l, "ordinal": o, "physical": p, "visible": n, "value": v}``."""
import json
import sys

import cupy

import jtmini as jt
from jtmini.runtime import cuda

with jt.flag_scope(use_cuda=True):
    value = (jt.array([1.0, 2.0]) * (jt.rank + 1)).sum().item()
    ordinal, physical = cuda.choose_device(jt.local_rank, cupy.cuda.runtime.getDeviceCount())
    report = {"rank": jt.rank, "local_rank": jt.local_rank, "ordinal": ordinal, "physical": physical,
              "current": cupy.cuda.Device().id, "visible": cupy.cuda.runtime.getDeviceCount(), "value": value}
sys.stdout.write(json.dumps(report) + "\n")
