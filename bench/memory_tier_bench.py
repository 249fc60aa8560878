"""What one save to the memory tier costs, as a ratio to a plain memory copy of the same state (issue 43).

    python bench/memory_tier_bench.py                      # 100 MB and 500 MB states, 5 and 3 repetitions
    python bench/memory_tier_bench.py --sizes 100 --reps 3 # shorter

The state is `checkpoint_bench.py`'s (weights and Adam state, 51 fp32 tensors, shaped as fastai's optimizer state).
For each size, after one warm-up of each, every repetition times, one after the other:

- `memcpy`: `copy_` of every tensor into buffers allocated once beforehand: the physical floor of any in-memory copy;
- `memory tier`: what `CheckpointCallback(memory_every_steps=...)` does at a memory save, on rank 0: `MemoryTier.write`
  of `checkpoint_writers` of the state (safetensors for the weights, `torch.save` for the optimizer state, the same
  files as a disk checkpoint), committed in `/dev/shm` through `write_checkpoint` (each file hashed, the manifest last,
  the rename), then the rotation that keeps the newest 2;
- `disk`: the same `write_checkpoint` into a folder on the disk that holds this repository (fsyncs included), for scale.

The memory tier's save is synchronous: its time is what training waits for. The ratio reported is the median of the
paired ratios (memory tier / memcpy of the same repetition). The machine is shared: its load is recorded beside.

Results: `bench/results/memory_tier.json`."""
from __future__ import annotations
import os, sys, json, time, shutil, argparse, platform, datetime, statistics, tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE)); sys.path.insert(0, str(HERE.parent))

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--sizes', type=int, nargs='+', default=[100, 500], help='state sizes, MB')
    p.add_argument('--reps', type=int, nargs='+', default=[5, 3], help='repetitions per size (the last one for the rest)')
    p.add_argument('--out', default=str(HERE/'results'/'memory_tier.json'))
    a = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from checkpoint_bench import make_state, tensors, nbytes, trim, load
    from ddpsafe.memory import MemoryTier, SHM
    from ddpsafe.parts import checkpoint_writers
    from ddpsafe.manifest import write_checkpoint, rotate
    shm = SHM if SHM.is_dir() else Path(tempfile.gettempdir())
    mem_dir, disk_dir = shm/f'ddpsafe-bench-{os.getpid()}', Path(tempfile.mkdtemp(prefix='memtier-', dir=HERE))
    out, t_start = dict(sizes={}), time.monotonic()
    try:
        for i, mb in enumerate(a.sizes):
            reps = a.reps[min(i, len(a.reps)-1)]
            state = make_state(mb*10**6)
            ts, size = tensors(state), nbytes(state)
            bufs = [torch.empty_like(t) for t in ts]
            tier = MemoryTier(mem_dir/f'{mb}', every_steps=1, keep=2)
            files = lambda step: checkpoint_writers({'model.safetensors': state['model'], 'optimizer.pt': state['opt'], 'state.pt': dict(step=step)})
            def memcpy():
                for b, t in zip(bufs, ts): b.copy_(t)
            def to_memory(step): tier.write(step, files(step), dict(epoch=0))
            def to_disk(step):
                write_checkpoint(disk_dir, step, files(step), dict(epoch=0)); rotate(disk_dir, 2)
            runs = dict(memcpy=[], memory_tier=[], disk=[])
            for r in range(reps + 1):                       # the first: a warm-up, not counted
                for name, f in (('memcpy', lambda: memcpy()), ('memory_tier', lambda: to_memory(r)), ('disk', lambda: to_disk(r))):
                    for t in ts[:1]: t.add_(1e-3)           # a training step changes the state
                    trim(); t0 = time.perf_counter(); f(); dt = time.perf_counter() - t0
                    if r: runs[name].append(dt)
            ratios = [m/c for m, c in zip(runs['memory_tier'], runs['memcpy'])]
            med = {k: statistics.median(v) for k, v in runs.items()}
            out['sizes'][str(mb)] = dict(bytes=size, reps=reps, seconds=runs, median_seconds=med,
                                         memcpy_GBps=size/med['memcpy']/1e9, memory_tier_GBps=size/med['memory_tier']/1e9,
                                         ratio_memory_tier_to_memcpy=statistics.median(ratios),
                                         ratio_disk_to_memory_tier=statistics.median(d/m for d, m in zip(runs['disk'], runs['memory_tier'])),
                                         tier_holds=tier.holds_note())
            print(f'{mb} MB: memcpy {med["memcpy"]*1000:.1f} ms, memory tier {med["memory_tier"]*1000:.1f} ms '
                  f'(x{statistics.median(ratios):.2f} a memcpy), disk {med["disk"]*1000:.1f} ms', flush=True)
            tier.clear(); del state, ts, bufs; trim()
    finally:
        shutil.rmtree(mem_dir, ignore_errors=True); shutil.rmtree(disk_dir, ignore_errors=True)
    out.update(machine=dict(python=platform.python_version(), torch=torch.__version__, cpus=os.cpu_count(), torch_threads=torch.get_num_threads(),
                            memory_tier_folder=str(shm), load=load()),
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'), seconds=round(time.monotonic() - t_start, 1))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + '\n')
    print(f'wrote {a.out} in {out["seconds"]} s')

if __name__ == '__main__': main()
