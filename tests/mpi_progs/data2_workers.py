"""Each rank: per-rank global seeds, and a shuffled epoch read by 2 worker processes; prints one
JSON line (tests/test_compat_data2.py checks that ranks differ in random numbers and together
cover every sample once)."""
import json
import random

import numpy as np

import jtmini as jt
from jtmini.dataset import Dataset


class Noisy(Dataset):
    def __getitem__(self, k):
        return k, np.random.rand()


jt.set_global_seed(5)
draws = [random.random(), float(np.random.rand()), float(jt.rand(1).numpy()[0])]
ds = Noisy(batch_size=8, shuffle=True, num_workers=2, keep_numpy_array=True).set_attrs(total_len=40)
ids, noise = [], []
for k, r in ds:
    ids += k.tolist()
    noise += r.tolist()
print(json.dumps({"rank": jt.rank, "seed": jt.get_seed(), "draws": draws, "ids": ids, "noise": noise}))
