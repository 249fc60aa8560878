"""A plain PyTorch script under `torchrun --max-restarts` (tests/test_restarts.py): rank 1 SIGKILLs itself once the group has
started, in each of the first `KILLS` attempts whose group started (counted in the file `kills` of the working folder: an
attempt that could not start its group does not use up a kill); the next attempt must start its group, all-reduce and end.

    torchrun --nproc_per_node 2 --max-restarts 2 restart_plain.py ddpsafe|torch

`ddpsafe`: the group starts with `ddpsafe.dist.restarts.init_default_group`; `torch`: with `dist.init_process_group()`. Prints
`STARTED rank r attempt n` after the first all-reduce of each attempt, `DONE rank r attempt n` at the end."""
import os, sys, time, signal
from datetime import timedelta
from pathlib import Path
import torch, torch.distributed as dist

how, kills = sys.argv[1], int(os.environ.get('KILLS', '2'))
n, r = int(os.environ['TORCHELASTIC_RESTART_COUNT']), int(os.environ['RANK'])
timeout = timedelta(seconds=60)
if how == 'ddpsafe':
    from ddpsafe.dist.restarts import init_default_group
    init_default_group('gloo', timeout)
else: dist.init_process_group('gloo', timeout=timeout)
g = dist.new_group(backend='gloo')               # a second group, as ddpsafe's side group is
x = torch.ones(1); dist.all_reduce(x); dist.all_reduce(x, group=g)
print(f'STARTED rank {r} attempt {n}', flush=True)
def killed() -> int: return Path('kills').read_text().count('\n') if Path('kills').exists() else 0
if r == 1 and killed() < kills:
    with open('kills', 'a') as f: f.write(f'attempt {n}\n')
    time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
print(f'DONE rank {r} attempt {n}', flush=True)
dist.destroy_process_group()
