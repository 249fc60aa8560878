"""One rank of a simulated two-node run, started by `torch.distributed.run` (see `test_races.py::test_two_nodes`).

Usage: python -m torch.distributed.run --nnodes 2 --nproc_per_node 1 --node_rank K ... two_node.py MODE ATTEMPTS
MODE is `unguarded` (rank 0 `torch.save`s into its node's folder, every rank `torch.load`s from its own node's folder)
or `ddpsafe` (`atomic_save` + `safe_load`). `DDPSAFE_NODE_DIR` is this node's checkpoint folder: different per node,
as with node-local disks. Prints one `RESULT {json}` line per attempt."""
import os, sys, json, hashlib
from datetime import timedelta
from pathlib import Path
import torch, torch.distributed as dist

def state(i:int) -> dict: return {'step': torch.tensor(i), 'w': torch.arange(10_000, dtype=torch.float32) * (i + 1)}

def digest(sd:dict) -> str:
    h = hashlib.sha256()
    for k in sorted(sd): h.update(k.encode()); h.update(sd[k].numpy().tobytes())
    return h.hexdigest()[:16]

def main(mode:str, n:int):
    dist.init_process_group('gloo', timeout=timedelta(seconds=60))
    from ddpsafe.files.safe import atomic_save, safe_load
    r, node_dir = dist.get_rank(), Path(os.environ['DDPSAFE_NODE_DIR'])
    f = node_dir/'ckpt'/'model.pth'             # the same relative path on every node
    f.parent.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        if mode == 'ddpsafe':
            atomic_save(state(i), f)
            try: sd = safe_load(f); out = dict(ok=True, step=int(sd['step']), digest=digest(sd))
            except Exception as e: out = dict(ok=False, error=type(e).__name__, msg=str(e)[:200])
        else:
            if r == 0: torch.save(state(i), f)
            dist.barrier()                      # no timing excuse: the writer is done everywhere
            try: sd = torch.load(f); out = dict(ok=True, step=int(sd['step']), digest=digest(sd))
            except Exception as e: out = dict(ok=False, error=type(e).__name__, msg=str(e)[:200])
        out.update(attempt=i, rank=r, expected=digest(state(i)), file_here=f.exists())
        print('RESULT ' + json.dumps(out), flush=True)
        dist.barrier()
    dist.destroy_process_group()

if __name__ == '__main__': main(sys.argv[1], int(sys.argv[2]))
