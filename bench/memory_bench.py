"""How much host memory ddpsafe's asynchronous saves take beyond the state itself, save after save, in one run.

    python bench/memory_bench.py                        # 100 MB, 500 MB and 2 GB states, 5 saves each
    python bench/memory_bench.py --sizes 500 --saves 3  # shorter

Each size runs in a fresh process, so that memory freed by an earlier size does not hide what this one takes. The
state is `checkpoint_bench.py`'s (weights and Adam state, 51 fp32 tensors). The process allocates it, notes its
resident memory, then makes `--saves` asynchronous saves the way `CheckpointCallback` does: `StateBuffers.copy` of the
state (what training waits for), then `write_checkpoint` of `checkpoint_writers` on an `AsyncWriter` thread, waiting for
each write before the next copy (ddpsafe keeps at most one save in flight). Between saves the state is changed in
place, as a training step would.

For every save it records the peak resident memory (Linux's `VmHWM`, reset before each save through
`/proc/self/clear_refs`) minus the resident memory before the first save, over the state's size: the goal is at most
one extra copy (1.0), the same after the fifth save as after the
first, and buffers at the same addresses every time (reused, not reallocated). What a save takes beyond one copy
(thread stacks, `torch.save`'s small buffers) must stay under a fixed 32 MB, whatever the state's size.

Results: `bench/results/memory.json`."""
from __future__ import annotations
import os, sys, json, time, shutil, argparse, platform, datetime, tempfile, subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXED_MB = 32       # what a save may take beyond one copy of the state, whatever its size: thread stacks, torch.save's buffers

def status(key:str) -> int:
    "A `/proc/self/status` memory figure, in bytes"
    line = next(l for l in Path('/proc/self/status').read_text().splitlines() if l.startswith(key + ':'))
    return int(line.split()[1]) * 1024

def reset_peak() -> bool:
    "Reset `VmHWM` to the current resident memory; `False` where the kernel does not allow it"
    try: Path('/proc/self/clear_refs').write_text('5'); return True
    except OSError: return False

def one_size(mb:int, saves:int, folder:Path) -> dict:
    "Peak memory of `saves` asynchronous saves of a state of `mb` MB, in this process"
    import torch
    sys.path.insert(0, str(HERE))
    from checkpoint_bench import make_state, tensors, nbytes, trim
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

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--sizes', default='100,500,2000', help='state sizes in MB, comma separated (default 100,500,2000)')
    p.add_argument('--saves', type=int, default=5, help='asynchronous saves per size (default 5)')
    p.add_argument('--out', default=str(HERE/'results'), help='folder for memory.json')
    p.add_argument('--one', type=int, help=argparse.SUPPRESS)     # a child process: measure this size, print JSON
    a = p.parse_args(argv)
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
    res = dict(benchmark='memory', date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
               command=' '.join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
               machine=dict(platform=platform.platform(), cpus=os.cpu_count(), torch=torch.__version__), sizes=sizes)
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    (out/'memory.json').write_text(json.dumps(res, indent=1))

if __name__ == '__main__': main()
