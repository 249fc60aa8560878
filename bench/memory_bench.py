"""Host memory and step time of ddpsafe's saves to memory, in one run per size.

Default: the peak resident memory of `--saves` asynchronous saves (`StateBuffers.copy`, then `write_checkpoint` on an
`AsyncWriter`), each size in a fresh process, over the state's size: goal one copy + 32 MB, not growing, buffers reused.
`--tier`: what a save to the memory tier costs the step (`MemoryTier.ready` and `save`) and its background write, as
ratios to a `memcpy` of the same state into reused buffers, paired per repetition (issue 43).
Method: the benchmarks page, "Host memory of asynchronous saves" and "Goodput at realistic failure rates".

    python bench/memory_bench.py --sizes 100,500,2000 --saves 5          # -> results/memory.json
    python bench/memory_bench.py --tier --sizes 100,500 --reps 5,3       # -> results/memory_tier.json"""
from __future__ import annotations
import os, sys, json, time, shutil, argparse, platform, statistics, tempfile, subprocess
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, RESULTS, make_state, tensors, nbytes, trim, load, status, reset_peak, write_json, now
FIXED_MB = 32       # what a save may take beyond one copy of the state, whatever its size: thread stacks, torch.save's buffers

def one_size(mb:int, saves:int, folder:Path) -> dict:
    "Peak memory of `saves` asynchronous saves of a state of `mb` MB, in this process"
    import torch
    from ddpsafe.snapshot import StateBuffers, AsyncWriter
    from ddpsafe.checkpoint import rng_state
    from ddpsafe.parts import checkpoint_writers
    from ddpsafe.manifest import write_checkpoint, rotate
    state = make_state(mb*10**6)
    size = nbytes(state)
    bufs, writer, rngs = StateBuffers(), AsyncWriter(), [rng_state()]
    trim(); base = status('VmRSS')
    out = []
    for i in range(saves):
        for t in tensors(state): t.add_(1e-3)                 # a training step changes the state in place
        can_reset = reset_peak()
        t0 = time.perf_counter()
        snap = bufs.copy(state)
        blocking = time.perf_counter() - t0
        err = writer.submit(lambda snap=snap, step=i: write_checkpoint(folder, step, checkpoint_writers({'model.safetensors': snap['model'], 'optimizer.pt': snap['opt'], 'state.pt': dict(step=step), 'rng.pt': rngs})))
        err = err or writer.wait()
        if err is not None: raise err
        rotate(folder, 1)
        peak = status('VmHWM')
        out.append(dict(save=i+1, peak_extra_bytes=peak - base, peak_extra_over_state=(peak - base)/size, peak_was_reset=can_reset,
                        rss_after_bytes=status('VmRSS'), blocking_s=blocking, buffers_bytes=bufs.nbytes,
                        buffer_addresses=sorted(t.data_ptr() for t in tensors(snap))))
        print(f'  {mb} MB save {i+1}: peak {(peak - base)/size:.3f}x the state above the start; buffers {bufs.nbytes/size:.3f}x', flush=True)
    writer.wait()
    same = all(o['buffer_addresses'] == out[0]['buffer_addresses'] for o in out)
    for o in out: del o['buffer_addresses']
    ratios = [o['peak_extra_over_state'] for o in out]
    fixed = max(o['peak_extra_bytes'] for o in out) - size      # beyond one copy: threads, torch.save's buffers
    growth = out[-1]['peak_extra_bytes'] - out[min(1, len(out)-1)]['peak_extra_bytes']
    return dict(mb=mb, state_bytes=size, rss_before_saves=base, saves=out, buffers_reused=same, beyond_one_copy_bytes=fixed,
                growth_after_second_save_bytes=growth, min=min(ratios), median=sorted(ratios)[len(ratios)//2], max=max(ratios),
                goal=f'<= 1 copy + {FIXED_MB} MB, not growing', met=fixed <= FIXED_MB*2**20 and growth <= 0.01*size and same)

def tier(a):
    "The memory tier's step wait and background write against a memcpy of the same state, per size"
    import torch
    torch.set_num_threads(1)
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
               date=now(utc=True), seconds=round(time.monotonic() - t_start, 1))
    write_json(a.out, out)
    print(f'wrote {a.out} in {out["seconds"]} s')


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--sizes', default='100,500,2000', help='state sizes in MB, comma separated (default 100,500,2000)')
    p.add_argument('--saves', type=int, default=5, help='asynchronous saves per size (default 5)')
    p.add_argument('--tier', action='store_true', help="the memory tier's step wait and background write (default sizes 100,500)")
    p.add_argument('--reps', default='5,3', help='with --tier: repetitions per size, comma separated (the last one for the rest)')
    p.add_argument('--out', default=None, help='folder for memory.json; with --tier, the file (default results/memory_tier.json)')
    p.add_argument('--one', type=int, help=argparse.SUPPRESS)     # a child process: measure this size, print JSON
    a = p.parse_args(argv)
    if a.tier:
        a.sizes = [int(s) for s in (a.sizes if '--sizes' in (argv or sys.argv) else '100,500').split(',')]
        a.reps, a.out = [int(r) for r in a.reps.split(',')], a.out or str(RESULTS/'memory_tier.json')
        return tier(a)
    a.out = a.out or str(RESULTS)
    if a.one:
        folder = Path(tempfile.mkdtemp(prefix='ddpsafe-mem-'))
        try: print('RESULT ' + json.dumps(one_size(a.one, a.saves, folder)))
        finally: shutil.rmtree(folder, ignore_errors=True)
        return
    sizes = []
    for mb in map(int, a.sizes.split(',')):
        r = subprocess.run([sys.executable, __file__, '--one', str(mb), '--saves', str(a.saves)], capture_output=True, text=True)
        print(''.join(l + '\n' for l in r.stdout.splitlines() if not l.startswith('RESULT ')), end='')
        if r.returncode: sys.exit(f'{mb} MB failed:\n{r.stderr}')
        s = json.loads(next(l for l in r.stdout.splitlines() if l.startswith('RESULT '))[7:])
        print(f"{mb} MB: peak extra memory / state: min {s['min']:.3f}, median {s['median']:.3f}, max {s['max']:.3f}; "
              f"beyond one copy {s['beyond_one_copy_bytes']/2**20:.1f} MB; buffers reused: {s['buffers_reused']} ({'met' if s['met'] else 'MISSED'})", flush=True)
        sizes.append(s)
    import torch
    res = dict(benchmark='memory', date=now(utc=True),
               command=' '.join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
               machine=dict(platform=platform.platform(), cpus=os.cpu_count(), torch=torch.__version__), sizes=sizes)
    write_json(Path(a.out)/'memory.json', res)

if __name__ == '__main__': main()
