"""What a save to the memory tier costs the training step, as a ratio to a plain memory copy of the same state (issue 43).

    python bench/memory_tier_bench.py                             # 100 MB and 500 MB states, 5 and 3 repetitions
    python bench/memory_tier_bench.py --sizes 100 500 --reps 3    # shorter

The state is `checkpoint_bench.py`'s (weights and Adam state, 51 fp32 tensors, shaped as fastai's optimizer state).
For each size, after one warm-up of each (it allocates the buffers), every repetition times, one after the other:

- `memcpy`: `copy_` of every tensor into buffers allocated once beforehand: the physical floor of any in-memory copy;
- `step wait`: what a training step waits for at a memory save of `CheckpointCallback(memory_every_steps=...)`, on rank
  0: the tier's `ready` (is its writer idle?) and `save`, which copies the state into the tier's own `StateBuffers` and
  hands the commit to the tier's own `AsyncWriter` thread;
- `background write`: how long that thread then takes (`AsyncWriter.seconds`) for `MemoryTier.commit` of
  `checkpoint_writers` of the copy (safetensors for the weights, `torch.save` for the optimizer state, the same files
  as a disk checkpoint), committed in `/dev/shm` through `write_checkpoint` (each file hashed, the manifest last, the
  rename), then the rotation that keeps the newest 2. The bench waits for it before the next repetition, as a fit
  whose memory saves are far enough apart never finds a write in flight; the writer thread runs at `nice` 19, as in a
  fit, here beside an idle main thread.

The ratios reported are medians of the paired ratios (step wait / memcpy, background write / memcpy, of the same
repetition). The machine is shared: its load is recorded beside.

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
    import numpy as np, torch
    torch.set_num_threads(1)
    from checkpoint_bench import make_state, tensors, nbytes, trim, load
    from ddpsafe.memory import MemoryTier, SHM
    shm = SHM if SHM.is_dir() else Path(tempfile.gettempdir())
    mem_dir = shm/f'ddpsafe-bench-{os.getpid()}'
    out, t_start, load_before = dict(sizes={}), time.monotonic(), load()
    try:
        for i, mb in enumerate(a.sizes):
            reps = a.reps[min(i, len(a.reps)-1)]
            state = make_state(mb*10**6)
            ts, size = tensors(state), nbytes(state)
            bufs = [torch.empty_like(t) for t in ts]
            tier = MemoryTier(mem_dir/f'{mb}', every_steps=1, keep=2)
            files = lambda step: {'model.safetensors': state['model'], 'optimizer.pt': state['opt'], 'state.pt': dict(step=step)}
            def memcpy():
                for b, t in zip(bufs, ts): b.copy_(t)
            def to_memory(step):
                assert tier.ready(step), 'the memory writer is busy'
                tier.save(step, files(step), dict(epoch=0))
            runs = dict(memcpy=[], step_wait=[], background_write=[])
            for r in range(reps + 1):                       # the first: a warm-up, not counted
                for name, f in (('memcpy', memcpy), ('step_wait', lambda: to_memory(r))):
                    for t in ts[:1]: t.add_(1e-3)           # a training step changes the state
                    trim(); t0 = time.perf_counter(); f(); dt = time.perf_counter() - t0
                    if r: runs[name].append(dt)
                if getattr(tier, 'writer', None) is not None:   # before issue 61: the tier's own background write, timed by its thread
                    err = tier.writer.wait()
                    if err is not None: raise err
                    if r: runs['background_write'].append(tier.writer.seconds)
                elif r: runs['background_write'].append(0.)      # since: a sealed slot is the checkpoint, nothing is written after
            paired = lambda k: statistics.median(x/c for x, c in zip(runs[k], runs['memcpy']))
            med = {k: statistics.median(v) for k, v in runs.items()}
            out['sizes'][str(mb)] = dict(bytes=size, reps=reps, seconds=runs, median_seconds=med,
                                         memcpy_GBps=size/med['memcpy']/1e9, step_wait_GBps=size/med['step_wait']/1e9,
                                         ratio_step_wait_to_memcpy=paired('step_wait'),
                                         ratio_background_write_to_memcpy=paired('background_write'),
                                         tier_holds=tier.holds_note())
            print(f'{mb} MB: memcpy {med["memcpy"]*1000:.1f} ms, step wait {med["step_wait"]*1000:.1f} ms (x{paired("step_wait"):.2f} a memcpy), '
                  f'background write {med["background_write"]*1000:.1f} ms (x{paired("background_write"):.2f})', flush=True)
            tier.close(); tier.clear(); del state, ts, bufs, tier; trim()
    finally:
        shutil.rmtree(mem_dir, ignore_errors=True)
    out.update(machine=dict(python=platform.python_version(), torch=torch.__version__, cpus=os.cpu_count(), torch_threads=torch.get_num_threads(),
                            memory_tier_folder=str(shm), load_before=load_before, load=load()),
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'), seconds=round(time.monotonic() - t_start, 1))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + '\n')
    print(f'wrote {a.out} in {out["seconds"]} s')

if __name__ == '__main__': main()
