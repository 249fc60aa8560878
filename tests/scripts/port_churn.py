"""Run a command in a network namespace of its own, beside a process that keeps taking and freeing ports as a busy
machine's other jobs do (tests/test_restarts.py, the port race of torchrun's c10d recipe). The namespace keeps the churn
away from every other test; it has only loopback, and its own range of kernel-chosen ports: HELD + FREE of them, so that a
port freed there is taken again within a few of the churn's turns, however few turns a busy machine gives it (with the
whole range of 28,000 ports, a loaded 2-core machine gave the churn too few turns to take the launcher's port in 2 of 2 jobs).

    python port_churn.py HELD -- CMD ...     # exit code: CMD's

HELD: how many listening sockets on kernel-chosen ports the churn holds at once, freeing the oldest for each new one."""
import os, sys, ctypes, fcntl, socket, struct, subprocess, collections, resource
from pathlib import Path

CLONE_NEWNET, SIOCSIFFLAGS, IFF_UP = 0x40000000, 0x8914, 0x1
FIRST, FREE = 40000, 200   # the namespace's ports: FIRST to FIRST + HELD + FREE - 1

def own_network(held:int):
    "Enter a new network namespace, bring its loopback up, and narrow its kernel-chosen ports to `held` + `FREE`"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0: sys.exit(f'port_churn: unshare(CLONE_NEWNET) failed: {os.strerror(ctypes.get_errno())}')
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack('16sH22x', b'lo', IFF_UP))
    try: Path('/proc/sys/net/ipv4/ip_local_port_range').write_text(f'{FIRST} {FIRST + held + FREE - 1}')
    except OSError as e: sys.exit(f"port_churn: could not narrow the namespace's ports (/proc/sys read-only?): {e}")

def churn(held:int):
    "Take a port, free the oldest: forever"
    socks = collections.deque()
    while True:
        s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); socks.append(s)
        if len(socks) > held: socks.popleft().close()

if __name__ == '__main__':
    held, cmd = int(sys.argv[1]), sys.argv[sys.argv.index('--') + 1:]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, held + 1000)), hard))
    own_network(held)
    if (pid := os.fork()) == 0:
        try: churn(held)
        finally: os._exit(0)
    try: code = subprocess.call(cmd)
    finally: os.kill(pid, 9); os.waitpid(pid, 0)
    sys.exit(code)
