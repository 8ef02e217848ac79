"""One rank of shared_cache.py's torchrun job: a DistributedSampler over the per-sample files, a
DataLoader with 2 workers, a SharedCache that every rank of the node opens under one name, and a
barrier at each epoch's end (as a training step's all-reduce would). Writes what it saw to
OUT<rank>.json. Usage: shared_cache_rank.py FILES N OUT"""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from shared_cache import SHAPE, Files, same_batches, slab_objects
from traincache import SharedCache


def main():
    files, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cache = SharedCache("ranks", n, SHAPE, "float32", content_id=files)
    loads = torch.multiprocessing.Value("l", 0)
    sampler = DistributedSampler(range(n), num_replicas=dist.get_world_size(), rank=rank, shuffle=True, seed=3)
    per_epoch, same = [], True
    for epoch in range(3):
        sampler.set_epoch(epoch)
        before = loads.value
        got = [(x.clone(), i.clone()) for x, i in
               DataLoader(Files(cache, loads), batch_size=40, sampler=sampler, num_workers=2)]
        per_epoch.append(loads.value - before)
        want = list(DataLoader(Files(), batch_size=40, sampler=sampler))
        same = same and same_batches([got], [want])
        dist.barrier()
    report = {"rank": rank, "loads": per_epoch, "created": cache.created, "same_as_reference": same,
              "slab_objects": len(slab_objects()), "resident_bytes": os.stat(cache.slab.path).st_blocks * 512}
    with open(f"{out}{rank}.json", "w") as f:
        json.dump(report, f)
    dist.barrier()  # both ranks have measured before the creator removes the slab
    cache.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
