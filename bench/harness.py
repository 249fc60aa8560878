"""What every benchmark shares: the state saved, the machine's facts, the timer, alternation, medians and spreads, the JSON.

Each script of bench/ is one section of the benchmarks page (nbs/23_benchmarks.ipynb), which names the command that
wrote each figure; every script writes its JSON into `bench/results/` (`--out` elsewhere) and prints its table."""
from __future__ import annotations
import os, gc, sys, json, time, ctypes, datetime, platform, statistics, subprocess, threading
from pathlib import Path
import torch

HERE = Path(__file__).resolve().parent
RESULTS = HERE/'results'
if str(HERE.parent) not in sys.path: sys.path.insert(1, str(HERE.parent))    # the repository's ddpsafe
N_LAYERS, ROW = 17, 1024    # the saved state: 17 weights, each with Adam's exp_avg and exp_avg_sq, fp32 rows of 1024

def make_state(nbytes:int, seed:int=0) -> dict:
    "A model and Adam state of about `nbytes` fp32 bytes, shaped as fastai's `Optimizer.state_dict()`"
    g = torch.Generator().manual_seed(seed)
    rows = max(1, round(nbytes / (3*N_LAYERS*ROW*4)))
    model = {f'layers.{i}.weight': torch.randn(rows, ROW, generator=g) for i in range(N_LAYERS)}
    opt = dict(state=[dict(exp_avg=torch.randn(rows, ROW, generator=g), exp_avg_sq=torch.rand(rows, ROW, generator=g), step=1000)
                      for _ in range(N_LAYERS)], hypers=[dict(lr=1e-3, mom=0.9, sqr_mom=0.99, eps=1e-5, wd=0.01)])
    return dict(model=model, opt=opt)

def flat(state, name:str='') -> dict:
    "The tensors of `state` under dotted names, in a fixed order"
    if isinstance(state, torch.Tensor): return {name: state}
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    return {k: t for key, v in items for k, t in flat(v, f'{name}.{key}' if name else str(key)).items()}

def tensors(state) -> list: return list(flat(state).values())
def nbytes(state) -> int: return sum(t.numel()*t.element_size() for t in tensors(state))

def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try: os.fsync(fd)
    finally: os.close(fd)

def load() -> dict:
    "How busy the machine is: 1-minute load average and the share of the last 10 s some task waited for a CPU"
    out = dict(load1=os.getloadavg()[0])
    try: out['cpu_pressure_avg10'] = float(Path('/proc/pressure/cpu').read_text().split()[1].split('=')[1])
    except (OSError, IndexError, ValueError): pass
    return out

def wait_quiet(max_s:float, below:float=50.) -> float:
    "Wait up to `max_s` seconds for the CPU pressure (avg10, %) to drop below `below`; the seconds waited"
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s and load().get('cpu_pressure_avg10', 0) >= below: time.sleep(1)
    return time.monotonic() - t0

def trim():
    "Give freed memory back to the OS"
    gc.collect()
    try: ctypes.CDLL('libc.so.6').malloc_trim(0)
    except OSError: pass

def status(key:str) -> int:
    "A `/proc/self/status` memory figure, in bytes"
    return int(next(l for l in Path('/proc/self/status').read_text().splitlines() if l.startswith(key + ':')).split()[1]) * 1024

def reset_peak() -> bool:
    "Reset `VmHWM` to the current resident memory; `False` where the kernel does not allow it"
    try: Path('/proc/self/clear_refs').write_text('5'); return True
    except OSError: return False

def sync(device):
    if device.type == 'cuda': torch.cuda.synchronize(device)

def timed(f, *args) -> float:
    "Seconds `f(*args)` takes"
    t0 = time.perf_counter(); f(*args); return time.perf_counter() - t0

def device_facts(device) -> dict:
    "The device: the card's name, its memory, the CUDA version; or the CPU's"
    if device.type != 'cuda': return dict(type='cpu', name=platform.processor() or platform.machine(), cpus=os.cpu_count(), threads=torch.get_num_threads())
    p = torch.cuda.get_device_properties(device)
    return dict(type='cuda', name=p.name, memory_gb=round(p.total_memory / 2**30, 1), count=torch.cuda.device_count(),
                cuda=torch.version.cuda, capability=f'{p.major}.{p.minor}', cpus=os.cpu_count())

def machine() -> dict:
    "The CPU, memory and versions of this run"
    cpu = next((l.split(':', 1)[1].strip() for l in Path('/proc/cpuinfo').read_text().splitlines() if l.startswith('model name')), platform.processor())
    mem = next((int(l.split()[1])*1024 for l in Path('/proc/meminfo').read_text().splitlines() if l.startswith('MemTotal')), None)
    import safetensors, fastai, ddpsafe
    try: commit = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=HERE, capture_output=True, text=True).stdout.strip()
    except OSError: commit = None
    return dict(cpu=cpu, cores=os.cpu_count(), mem_bytes=mem, platform=platform.platform(), python=platform.python_version(),
                torch=torch.__version__, torch_threads=torch.get_num_threads(), safetensors=safetensors.__version__,
                fastai=fastai.__version__, ddpsafe=ddpsafe.__version__, git_commit=commit)

def now(utc:bool=False) -> str: return datetime.datetime.now(datetime.timezone.utc if utc else None).isoformat(timespec='seconds')

def command(script:str, argv=None) -> str:
    "The command line that made a result, without `--dir X` (a temporary folder of the machine it ran on)"
    args, out, skip = list(sys.argv[1:] if argv is None else argv), [], False
    for x in args:
        if skip: skip = False
        elif x == '--dir': skip = True
        elif not x.startswith('--dir='): out.append(x)
    return ' '.join([f'bench/{script}', *out])

def rotated(xs:list, r:int) -> list:
    "`xs` rotated by `r`: the order of repetition `r`, so that the machine's drift hits every mode alike"
    k = r % len(xs)
    return xs[k:] + xs[:k]

def spread(xs) -> dict|None:
    "Median, range, mean and count of `xs` (its `None`s left out)"
    xs = [x for x in xs if x is not None]
    return dict(median=statistics.median(xs), min=min(xs), max=max(xs), mean=statistics.fmean(xs), n=len(xs)) if xs else None

def write_json(path, res:dict) -> Path:
    "`res` as JSON at `path`, its folder made"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1, default=str))
    return path

class GILProbe:
    "A thread that sleeps `tick` s in a loop and records how late it wakes: late while another thread holds the GIL"
    def __init__(self, tick:float=0.001): self.tick, self.wakes, self._stop, self._thread = tick, [], threading.Event(), None
    def _run(self):
        while not self._stop.is_set():
            t0 = time.perf_counter(); time.sleep(self.tick); t1 = time.perf_counter()
            self.wakes.append((t0, t1 - t0 - self.tick))
    def __enter__(self):
        self._thread = threading.Thread(target=self._run, name='gil-probe', daemon=True); self._thread.start(); return self
    def __exit__(self, *exc): self._stop.set(); self._thread.join()
    def lates(self, since:float=float('-inf'), until:float=float('inf')) -> list:
        "How late each wake due between `since` and `until` (`time.perf_counter()`) came, in seconds"
        return [late for t, late in list(self.wakes) if since <= t < until]
    def longest(self, since:float=float('-inf'), until:float=float('inf')) -> float:
        "The latest wake due between `since` and `until`, in seconds"
        return max(self.lates(since, until), default=0.)
