"""Shared helpers for the race suite: how many attempts to run, and how to report the counts.

`DDPSAFE_FULL=1` switches every race from its short count to its full count (50 by default).
`DDPSAFE_RACE_REPORT=path` appends one JSON line per race to `path`."""
from __future__ import annotations
import os, sys, json, time, importlib.util
from pathlib import Path
import pytest

def full_run() -> bool:
    "Is this a full run (`DDPSAFE_FULL=1`)?"
    return os.environ.get('DDPSAFE_FULL', '').strip().lower() not in ('', '0', 'false', 'no')

def train_ckpt():
    "tests/scripts/train_ckpt.py as a module: one copy per session, so the test files share its cache of baselines"
    name = 'ddpsafe_train_ckpt'
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent/'scripts'/'train_ckpt.py')
        m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m)
    return sys.modules[name]

def attempts(short:int, full:int=50) -> int:
    "`full` attempts when `DDPSAFE_FULL=1`, else `short`"
    return full if full_run() else short

def report_race(race:str, unguarded_failures:int, unguarded_attempts:int, ddpsafe_failures:int, ddpsafe_attempts:int,
                **details) -> dict:
    "Print the counts of one race and append them as a JSON line to `$DDPSAFE_RACE_REPORT`, if set"
    rec = dict(race=race, attempts=ddpsafe_attempts, unguarded_attempts=unguarded_attempts,
               unguarded_failures=unguarded_failures, ddpsafe_attempts=ddpsafe_attempts,
               ddpsafe_failures=ddpsafe_failures, full=full_run(), **details)
    print(f'\n[race] {race}: unguarded failed {unguarded_failures}/{unguarded_attempts}, '
          f'ddpsafe failed {ddpsafe_failures}/{ddpsafe_attempts}'
          + ''.join(f'; {k}={v}' for k,v in details.items()))
    if dest := os.environ.get('DDPSAFE_RACE_REPORT'):
        with open(dest, 'a') as f: f.write(json.dumps(rec, default=str) + '\n')
    return rec

@pytest.fixture(name='attempts')
def attempts_fixture():
    "The `attempts(short, full=50)` function"
    return attempts

@pytest.fixture(name='report_race')
def report_race_fixture():
    "The `report_race(...)` function"
    return report_race

@pytest.fixture
def stopwatch():
    "Seconds since the test started, as a function"
    t0 = time.monotonic()
    return lambda: round(time.monotonic() - t0, 2)
