"""free_port(): a port for a test job's rendezvous store, as `accel launch --main_process_port 0` picks one: below
the kernel's ephemeral range, where no outgoing connection (store clients, Gloo's pairs of every job running beside
this one) takes its local port between the check and rank 0's listen. bind(0) hands out ports inside that range."""
import random
import socket


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("", port))
            return True
        except OSError:
            return False


def free_port():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    if low > 21000:
        for _ in range(200):
            port = random.randrange(20000, low)
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
