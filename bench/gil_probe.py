"""The GIL probe: a thread that sleeps 1 ms in a loop and records how late it wakes. It wakes late while another thread
holds the GIL (or while the machine gives it no CPU), so its longest late wake bounds what a training thread could be
kept waiting for by a thread that holds the GIL, such as ddpsafe's writer.

    with GILProbe() as probe: work()
    probe.longest(), probe.lates(since, until)   # seconds

Used by `fit_bench.py` beside whole fits, and by `tests/test_gil.py` beside the writer alone."""
from __future__ import annotations
import time, threading

class GILProbe:
    "A thread that sleeps `tick` seconds in a loop and records when each wake was due and how late it came"
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
