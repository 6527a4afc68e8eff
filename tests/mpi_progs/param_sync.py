"""Jittor's ``param_sync_iter``: every that many steps the optimizer broadcasts rank 0's
parameters again, so a rank that drifted (here rank 1 moves its weight by hand after the first
step) is brought back. Run by tests/test_jittor_signatures.py under ``mpirun -np 2``; each rank
prints ``{"rank": r, "after": [w after each step]}``.
"""
import json

import numpy as np

import jtmini as jt
from jtmini import nn

w = jt.array(np.ones(3, "float32"))
opt = nn.SGD([w], 0.1)
opt.param_sync_iter = 3             # as Jittor users set it
after = []
for step in range(4):
    opt.step((w * w).sum())
    after.append(w.numpy().tolist())
    if step == 0 and jt.rank == 1:
        w.assign(w + 1.0)           # a rank that drifts: its own update, outside the optimizer
print(json.dumps({"rank": jt.rank, "after": after}), flush=True)
