"""Marker lines of the training scripts in this folder: printed and flushed at once, and, with a marks folder, appended
to `rank{r}.log` there, which the tests read while the ranks run (no `sleep` as synchronisation)."""
from pathlib import Path

def marker_log(marks:str|None, # The folder of the ranks' marker logs; `None`: print only
               r:int):         # This process's rank
    "A function that says one marker line"
    log = None
    if marks: Path(marks).mkdir(parents=True, exist_ok=True); log = open(Path(marks)/f'rank{r}.log', 'a', buffering=1)
    def say(line:str):
        print(line, flush=True)
        if log: log.write(line + '\n')
    return say
