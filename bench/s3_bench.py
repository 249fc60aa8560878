"""Saving a checkpoint to S3 (a SeaweedFS server on loopback, `ddpsafe.testing.S3TestServer`): ddpsafe's `write_checkpoint`
to an `s3://` URL against s3fs putting the same four files' bytes (serialized beforehand) in one `fs.pipe`, on
`harness.make_state` states; both each repetition, order rotated, `s3fs_put / ddpsafe` paired. Method: the benchmarks
page, "Saving to S3".

    python bench/s3_bench.py --sizes 100,500 --reps 5     # -> results/s3.json"""
from __future__ import annotations
import sys, time, argparse, statistics, tempfile
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, make_state, trim, load, machine, now, command, write_json
from ddpsafe.state.parts import rng_state; from ddpsafe.files.codec import checkpoint_writers; from ddpsafe.storage.manifest import write_checkpoint
from ddpsafe.storage.commit import write_file, as_path

GOAL = ('ddpsafe save to S3 throughput / s3fs putting the same bytes', '>=', 0.8)
METHODS = ['s3fs_put', 'ddpsafe']

def files_of(state) -> dict:
    return checkpoint_writers({'model.safetensors': state['model'], 'optimizer.pt': state['opt'], 'state.pt': dict(epoch=0, iter=1, train_iter=1000, global_step=1000, world_size=1), 'rng.pt': [rng_state()]})

def serialized(files:dict) -> dict:
    "The bytes of each file, as the writers make them"
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, w in files.items():
            write_file(Path(d)/name, w, digest=False); out[name] = (Path(d)/name).read_bytes()
    return out

def measure_size(mb:int, reps:int, s3, log=print) -> dict:
    state = make_state(mb*10**6)
    blobs = serialized(files_of(state))
    root = as_path(s3.url(f'bench-{mb}'), s3.storage_options)
    fs, n = root.fs, [0]
    def target(): n[0] += 1; return f'{root.path}/{n[0]}'
    def s3fs_put():
        t = target(); t0 = time.perf_counter()
        fs.pipe({f'{t}/{name}': b for name, b in blobs.items()})      # s3fs uploads them concurrently
        return time.perf_counter() - t0
    def ddpsafe():
        n[0] += 1; t0 = time.perf_counter()
        write_checkpoint(root/str(n[0]), 1000, files_of(state), dict(reason='steps'))
        return time.perf_counter() - t0
    runs = {m: [] for m in METHODS}
    for rep in range(-1, reps):
        order = METHODS[max(rep, 0) % 2:] + METHODS[:max(rep, 0) % 2]
        for m in order:
            dt = (s3fs_put if m == 's3fs_put' else ddpsafe)()
            fs.rm(root.path, recursive=True); trim()
            if rep >= 0: runs[m].append(dt)
        if rep >= 0: log(f'  {mb} MB rep {rep+1}/{reps}: ' + ', '.join(f'{m} {runs[m][-1]:.2f} s' for m in METHODS))
    ratio = [runs['s3fs_put'][i] / runs['ddpsafe'][i] for i in range(reps)]
    return dict(mb=mb, bytes=sum(map(len, blobs.values())), runs=runs, ratio_per_rep=ratio,
                ratio=dict(median_paired=statistics.median(ratio), min=min(ratio), max=max(ratio),
                           of_minimums=min(runs['s3fs_put'])/min(runs['ddpsafe'])),
                medians={m: statistics.median(v) for m, v in runs.items()},
                throughput_mb_s={m: sum(map(len, blobs.values()))/1e6/statistics.median(v) for m, v in runs.items()})

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--sizes', default='100,500'); p.add_argument('--reps', type=int, default=5)
    p.add_argument('--out', default=str(HERE/'results'/'s3.json'))
    a = p.parse_args(argv)
    from ddpsafe.testing import S3TestServer
    torch.set_num_threads(1)
    out = dict(when=now(), command=command('s3_bench.py', argv), machine=machine(), load_before=load(), goal=dict(what=GOAL[0], goal=f'{GOAL[1]} {GOAL[2]}'), sizes=[])
    with S3TestServer() as s3:
        for mb in map(int, a.sizes.split(',')):
            print(f'{mb} MB state:')
            r = measure_size(mb, a.reps, s3)
            r['met'] = r['ratio']['median_paired'] >= GOAL[2]
            print(f"  s3fs_put / ddpsafe: median {r['ratio']['median_paired']:.2f} (min {r['ratio']['min']:.2f}, max {r['ratio']['max']:.2f}); "
                  f"{'met' if r['met'] else 'MISSED'} ({GOAL[1]} {GOAL[2]}); MB/s {r['throughput_mb_s']}")
            out['sizes'].append(r)
    write_json(a.out, out)
    print(f'wrote {a.out}')

if __name__ == '__main__': main()
