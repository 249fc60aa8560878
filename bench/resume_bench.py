"""How long ddpsafe's resume takes against `torch.load` of the same state: a model of 17 bias-free Linear layers with
fastai's `Adam` after one step; `torch_load` (one `torch.save` file, `load_state_dict`, the RNG states) and `ddpsafe`
(`choose_checkpoint`, `read_checkpoint_file` of each file, `load_weights`, the optimizer, the RNG), alternately, each
after freed memory went back to the OS; the ratio per repetition. Goal <= 1.2. Method: the benchmarks page, "Resume".

    python bench/resume_bench.py --sizes 100,500 --reps 7     # from the page cache -> results/resume.json
    python bench/resume_bench.py --sizes 100,500 --cold       # as root on Linux: the page cache dropped before each load
                                                              #   -> results/resume_cold.json"""
from __future__ import annotations
import os, sys, time, argparse, statistics, tempfile, shutil, torch
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import HERE, N_LAYERS, ROW, load, wait_quiet, trim, timed, write_json, now, sync, device_facts, machine, command
from ddpsafe.state.parts import model_weights, load_weights, rng_state, set_rng_state; from ddpsafe.files.codec import checkpoint_writers
from ddpsafe.storage.manifest import write_checkpoint; from ddpsafe.state.resume import choose_checkpoint, read_checkpoint_file

def learner_state(mb:int):
    "A model and fastai `Adam` optimizer of about `mb` MB together, after one step"
    from fastai.optimizer import Adam
    torch.manual_seed(0)
    rows = max(1, round(mb * 2**20 / (3*N_LAYERS*ROW*4)))
    model = torch.nn.Sequential(*[torch.nn.Linear(ROW, rows, bias=False) for _ in range(N_LAYERS)])
    opt = Adam(list(model.parameters()), lr=1e-3)
    for p in model.parameters(): p.grad = torch.randn_like(p)
    opt.step()
    return model, opt

def save_both(model, opt, folder:Path):
    "The same state as one `torch.save` file and as a ddpsafe checkpoint"
    rngs = [rng_state()]
    torch.save(dict(model=model.state_dict(), opt=opt.state_dict(), rng=rngs), folder/'plain.pt')
    write_checkpoint(folder/'checkpoints', 1000, checkpoint_writers({'model.safetensors': model_weights(model), 'optimizer.pt': opt.state_dict(), 'state.pt': dict(step=1000), 'rng.pt': rngs}),
                     dict(epoch=0, world_size=1))

def torch_load(model, opt, folder:Path):
    s = torch.load(folder/'plain.pt', weights_only=False)
    model.load_state_dict(s['model']); opt.load_state_dict(s['opt']); set_rng_state(s['rng'][0])

def ddpsafe_resume(model, opt, folder:Path, stages:dict|None=None):
    t = [time.perf_counter()]
    ck, man, _ = choose_checkpoint(folder/'checkpoints'); t.append(time.perf_counter())
    read_checkpoint_file(ck, 'state.pt', man)
    weights = read_checkpoint_file(ck, 'model.safetensors', man, mapped=True); t.append(time.perf_counter())
    load_weights(model, weights, ck/'model.safetensors')
    o = read_checkpoint_file(ck, 'optimizer.pt', man); t.append(time.perf_counter())
    opt.load_state_dict(o)
    set_rng_state(read_checkpoint_file(ck, 'rng.pt', man)[0]); t.append(time.perf_counter())
    if stages is not None:
        for name, a, b in zip(('choose and verify', 'read state and weights', 'load weights, read optimizer', 'load optimizer, rng'), t, t[1:]):
            stages[name] = b - a

def drop_page_cache() -> str|None:
    "Write the dirty pages out and drop the clean ones from the page cache; why not, where the OS refuses"
    os.sync()
    try: Path('/proc/sys/vm/drop_caches').write_text('1'); return None
    except OSError as e: return f'/proc/sys/vm/drop_caches: {e.strerror} (needs root on Linux)'

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--sizes', default='100,500', help='state sizes in MB, comma separated (default 100,500)')
    p.add_argument('--reps', type=int, default=7, help='paired repetitions per size (default 7), after one warm-up')
    p.add_argument('--out', default=str(HERE/'results'), help='folder for resume.json')
    p.add_argument('--quiet', type=float, default=30., help='wait up to this many seconds for CPU pressure below 50%% before each repetition')
    p.add_argument('--cold', action='store_true', help='drop the page cache before each load (Linux, root): read from the disk; writes resume_cold.json')
    p.add_argument('--device', default='cpu', help="where the model is loaded: 'cpu' (default) or 'cuda' (writes resume_cuda.json)")
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == 'cuda' and not torch.cuda.is_available(): sys.exit('resume_bench.py: --device cuda, and this machine has no CUDA device')
    cold_refused = None
    sizes = []
    for mb in map(int, a.sizes.split(',')):
        folder = Path(tempfile.mkdtemp(prefix='ddpsafe-bench-'))
        model, opt = learner_state(mb)
        save_both(model, opt, folder)
        model.to(device)           # loaded onto the device: torch files restored there from the memory map, safetensors copied there
        nbytes = sum(f.stat().st_size for f in (folder/'checkpoints').rglob('*') if f.is_file())
        torch_load(model, opt, folder); ddpsafe_resume(model, opt, folder)          # warm-up
        reps = []
        for r in range(a.reps):
            wait_quiet(a.quiet)
            order = [('torch_load', torch_load), ('ddpsafe', ddpsafe_resume)]
            if r % 2: order.reverse()
            stages, rep = {}, {}
            for name, f in order:
                trim()                     # both start with the memory given back, as a fresh process would
                if a.cold: cold_refused = drop_page_cache() or cold_refused
                rep[name] = timed(lambda *x: (f(*x), sync(device)), model, opt, folder, *([stages] if name == 'ddpsafe' else []))
            rep['ddpsafe_stages'] = stages
            rep['ratio'] = rep['ddpsafe'] / rep['torch_load']
            rep['load'] = load()
            reps.append(rep); trim()
            print(f"{mb} MB rep {r+1}/{a.reps}: torch.load {rep['torch_load']:.3f} s, ddpsafe {rep['ddpsafe']:.3f} s: x{rep['ratio']:.2f}", flush=True)
        ratios = [x['ratio'] for x in reps]
        s = dict(mb=mb, checkpoint_bytes=nbytes, reps=reps, min=min(ratios), median=statistics.median(ratios), max=max(ratios),
                 goal='<= 1.2', met=statistics.median(ratios) <= 1.2)
        print(f"{mb} MB: ddpsafe resume / torch.load: min {s['min']:.2f}, median {s['median']:.2f}, max {s['max']:.2f} "
              f"(goal <= 1.2: {'met' if s['met'] else 'MISSED'})", flush=True)
        sizes.append(s)
        shutil.rmtree(folder, ignore_errors=True)
    res = dict(date=now(), command=command('resume_bench.py'), machine=machine(), device=device_facts(device),
               page_cache='dropped before each load' if a.cold and not cold_refused else f'not dropped: {cold_refused}' if a.cold else 'warm: the files were just written',
               sizes=sizes)
    write_json(Path(a.out)/(f'resume{"_cold" if a.cold else ""}{"" if device.type == "cpu" else "_" + device.type}.json'), res)

if __name__ == '__main__': main()
