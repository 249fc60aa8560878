"""Pretrained weights are downloaded once a node (issue 59, item 5). The README's example builds its learner with
`vision_learner(dls, resnet18)` on every rank, which downloads resnet18's weights through `torch.hub` into the node's
one cache. Here two real processes of one node load the same weights at once from a local, slow server: without
ddpsafe, each downloads (the race reproduced, counted); with `import ddpsafe.all`, one does and the other finds the
file, every attempt. Both load the same weights either way."""
from __future__ import annotations
import io, sys, time, threading, subprocess, http.server
from pathlib import Path
import pytest, torch

ROOT = Path(__file__).resolve().parents[1]
ATTEMPTS = 3

class Weights:
    "A local HTTP server of one small weights file that answers slowly, counting its downloads"
    def __init__(self, seconds:float=1.0):
        buf = io.BytesIO(); torch.save({'w': torch.arange(4.)}, buf)
        payload, self.got = buf.getvalue(), []
        got = self.got
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                got.append(self.path); time.sleep(seconds)
                self.send_response(200); self.send_header('Content-Length', str(len(payload))); self.end_headers()
                self.wfile.write(payload)
            def log_message(self, *a): pass
        self.srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f'http://127.0.0.1:{self.srv.server_port}/resnet-tiny.pth'
    def close(self): self.srv.shutdown()

LOAD = '''
import sys, torch.hub
{imports}
w = torch.hub.load_state_dict_from_url(sys.argv[1], model_dir=sys.argv[2], progress=False)
print(w['w'].tolist())
'''

def two_ranks_load(url:str, cache:Path, imports:str) -> list:
    "Two processes of one node load `url` into `cache` at once; their printed weights (a hang fails, naming the process)"
    procs = [subprocess.Popen([sys.executable, '-c', LOAD.format(imports=imports), url, str(cache)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = []
    for r, p in enumerate(procs):
        try: out = p.communicate(timeout=120)[0]
        except subprocess.TimeoutExpired:
            for q in procs: q.kill()
            pytest.fail(f'process {r} (rank {r} of the node) did not finish loading the weights within 120 s')
        assert p.returncode == 0, f'process {r}: {out[-2000:]}'
        outs.append(out.strip().splitlines()[-1])
    return outs

@pytest.mark.timeout(600)
def test_weights_downloaded_once_a_node(tmp_path):
    srv = Weights()
    try:
        counts = {}
        for name, imports in [('torch alone', ''), ('ddpsafe', 'import ddpsafe.all')]:
            counts[name] = []
            for i in range(ATTEMPTS):
                before = len(srv.got)
                outs = two_ranks_load(srv.url, tmp_path/f'{name}-{i}', imports)
                assert outs == ['[0.0, 1.0, 2.0, 3.0]']*2, outs
                counts[name].append(len(srv.got) - before)
        print(f'downloads of one file by 2 processes at once, {ATTEMPTS} attempts: {counts}')
        assert sum(c == 2 for c in counts['torch alone']) >= 1, f'the race did not show without ddpsafe: {counts}'
        assert counts['ddpsafe'] == [1]*ATTEMPTS, f'with ddpsafe, a node downloaded the weights more than once: {counts}'
    finally: srv.close()
