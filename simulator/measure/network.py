"""A real, small, bandwidth-shaped cluster on one Linux machine.

Loopback is not a network: it is CPU-bound and noisy, and every "link" is a memory copy. To
measure collectives under conditions the simulator models, :class:`ShapedNetwork` builds the
star topology of the ``star`` builder out of kernel objects::

    netns csim-<pid>-r0      netns csim-<pid>-br       netns csim-<pid>-r1
    csim0 10.77.0.1/24 ====== port0 --[bridge br0]-- port1 ====== csim0 10.77.0.2/24
          tbf egress   (veth)  tbf egress     tbf egress   (veth)  tbf egress

* one network namespace per rank and one for the bridge (the switch), so nothing touches the
  host's own interfaces, addresses or routes; the addresses 10.77.0.<i+1>/24 exist only inside
  these namespaces, and every rank's interface has the same name, ``csim0``;
* each rank's veth pair is one full-duplex link: a token-bucket filter (``tc qdisc ... tbf``)
  on the rank side limits what the rank sends, one on the bridge side limits what it receives;
  both at ``bandwidth_bytes_per_s``. ``tc`` counts whole Ethernet frames (14-byte header plus
  IP and TCP headers), so TCP payload moves at about 1448/1514 = 95.6 % of the shaped rate;
* the kernel here has no ``netem``, so latency cannot be shaped; :func:`measure_rtt` measures
  the round trip of a TCP ping-pong between two ranks (kernel stack + veth + bridge + Python),
  and :func:`topology_yaml` puts half of it, split over the two links of a star path, into
  ``link_latency``.

Everything is torn down on leaving the context: on normal exit, on an exception, and on SIGINT
or SIGTERM (handlers installed while the context is open, from the main thread). Processes
started with :meth:`ShapedNetwork.run_in_namespace` are killed first. Namespaces left behind by a
process that was killed with SIGKILL are removed the next time a network is built
(:func:`remove_stale_namespaces`). Building needs root and iproute2 (``ip``, ``tc``); setup takes
about 0.1 s.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import ConfigError
from simulator.units import format_bandwidth, format_duration

from . import MeasurementError

__all__ = ["DEFAULT_BANDWIDTH_BYTES_PER_S", "ShapedNetwork", "TCP_PAYLOAD_FRACTION", "TbfParams", "check_requirements",
           "list_namespaces", "measure_rtt", "remove_stale_namespaces", "tbf_params",
           "topology_yaml"]

#: 1 Gbit/s in bytes per second.
DEFAULT_BANDWIDTH_BYTES_PER_S = 125e6
#: Name of every rank's interface inside its namespace.
RANK_IFNAME = "csim0"
#: The subnet: rank i has 10.77.0.<i+1>.
SUBNET_PREFIX = "10.77.0."
MAX_RANKS = 250
_PREFIX = "csim-"
_COMMAND_TIMEOUT_S = 10.0


def check_requirements() -> None:
    """Raise ConfigError naming exactly what is missing: root, ``ip`` or ``tc``."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root privileges (network namespaces and tc need them; run as root)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            missing.append(f"the '{tool}' command (install iproute2: apt-get install -y "
                           f"iproute2)")
    if missing:
        raise ConfigError("cannot build a shaped network: missing " + "; ".join(missing))


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MeasurementError(f"'{' '.join(argv)}' did not finish in "
                               f"{_COMMAND_TIMEOUT_S:g} s") from None
    if check and done.returncode != 0:
        raise MeasurementError(f"'{' '.join(argv)}' failed: "
                               f"{(done.stderr or done.stdout).strip()}")
    return done


def list_namespaces() -> list[str]:
    """Names of the clustersim network namespaces (``csim-*``) that exist now."""
    done = _run(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(_PREFIX)]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_namespaces() -> list[str]:
    """Delete ``csim-<pid>-*`` namespaces whose creating process no longer exists."""
    removed = []
    for name in list_namespaces():
        match = re.match(rf"{_PREFIX}(\d+)-", name)
        if match and not _pid_alive(int(match[1])):
            if _run(["ip", "netns", "del", name], check=False).returncode == 0:
                removed.append(name)
    return removed


@dataclass(frozen=True)
class TbfParams:
    """Token-bucket filter settings for one direction of one link."""

    rate_bits_per_s: int
    burst_bytes: int   # bucket depth: what may leave back to back at line speed
    limit_bytes: int   # queue: bytes waiting for tokens before packets are dropped


def tbf_params(bandwidth_bytes_per_s: float) -> TbfParams:
    """tbf settings for a rate: a shallow bucket so bursts barely beat the rate, a deep queue.

    ``burst = max(32 KiB, 0.25 ms of traffic)``: at least two 16 KiB segments (GSO frames
    larger than the bucket are split by tbf), and small against the >= 1 MiB messages the
    bandwidth model is checked with (a full bucket lets at most ``burst`` bytes through early).
    ``limit = max(20 ms of traffic, 4 bursts, 256 KiB)`` keeps TCP from losing packets in the
    queue, which would measure loss recovery instead of bandwidth.
    """
    if not (isinstance(bandwidth_bytes_per_s, (int, float)) and
            math.isfinite(bandwidth_bytes_per_s) and bandwidth_bytes_per_s > 0):
        raise ConfigError(f"bandwidth must be a positive number of bytes/s, got "
                          f"{bandwidth_bytes_per_s!r}")
    if bandwidth_bytes_per_s < 125e3:  # tc cannot shape usefully below ~1 Mbit/s
        raise ConfigError(f"bandwidth {format_bandwidth(bandwidth_bytes_per_s)} is too low to "
                          f"shape; use at least 1 Mbps")
    burst = max(32 << 10, int(bandwidth_bytes_per_s * 250e-6))
    limit = max(int(bandwidth_bytes_per_s * 20e-3), 4 * burst, 256 << 10)
    return TbfParams(round(bandwidth_bytes_per_s * 8), burst, limit)


class ShapedNetwork:
    """Context manager: ``ranks`` namespaces on a bridge, each link shaped both ways.

    Parameters
    ----------
    ranks : int
        Hosts (namespaces) to build, 1 .. 250. A parameter-server measurement needs one more
        than its workers.
    bandwidth_bytes_per_s : float
        Rate of every link in each direction, bytes/s (default 125e6 = 1 Gbit/s).

    Examples
    --------
    >>> with ShapedNetwork(2, 12.5e6) as net:                      # doctest: +SKIP
    ...     server = net.run_in_namespace(1, ["python3", "server.py"])
    ...     net.run_in_namespace(0, ["python3", "client.py", net.address(1)]).wait()
    """

    _active_lock = threading.Lock()
    _active: "ShapedNetwork | None" = None

    def __init__(self, ranks: int, bandwidth_bytes_per_s: float = DEFAULT_BANDWIDTH_BYTES_PER_S):
        if not isinstance(ranks, int) or isinstance(ranks, bool) or not 1 <= ranks <= MAX_RANKS:
            raise ConfigError(f"ranks must be an integer in 1..{MAX_RANKS}, got {ranks!r}")
        self.ranks = ranks
        self.bandwidth_bytes_per_s = float(bandwidth_bytes_per_s)
        self.tbf = tbf_params(self.bandwidth_bytes_per_s)
        pid = os.getpid()
        self.namespaces = [f"{_PREFIX}{pid}-r{i}" for i in range(ranks)]
        self.bridge_namespace = f"{_PREFIX}{pid}-br"
        self._created: list[str] = []
        self._processes: list[subprocess.Popen] = []
        self._old_handlers: dict = {}
        self._open = False

    # -- addresses ---------------------------------------------------------------------------
    def address(self, rank: int) -> str:
        """IPv4 address of ``rank`` inside the network (``10.77.0.<rank+1>``)."""
        self._check_rank(rank)
        return f"{SUBNET_PREFIX}{rank + 1}"

    def _check_rank(self, rank: int) -> None:
        if not isinstance(rank, int) or not 0 <= rank < self.ranks:
            raise ConfigError(f"rank must be in 0..{self.ranks - 1}, got {rank!r}")

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "ShapedNetwork":
        check_requirements()
        with ShapedNetwork._active_lock:
            if ShapedNetwork._active is not None:
                raise ConfigError("a ShapedNetwork is already open in this process; "
                                  "close it first")
            ShapedNetwork._active = self
        self._open = True
        self._install_handlers()
        try:
            remove_stale_namespaces()
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _build(self) -> None:
        t = self.tbf
        shape = ["root", "tbf", "rate", f"{t.rate_bits_per_s}bit", "burst", str(t.burst_bytes),
                 "limit", str(t.limit_bytes)]
        br = self.bridge_namespace
        for ns in [br, *self.namespaces]:
            if ns in list_namespaces():
                raise MeasurementError(f"network namespace {ns} already exists")
            _run(["ip", "netns", "add", ns])
            self._created.append(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            if ns != br:  # per-namespace sysctl: the host's own setting is untouched
                _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                      "net.ipv4.tcp_slow_start_after_idle=0"])
        _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", "br0", "up"])
        for i, ns in enumerate(self.namespaces):
            port = f"port{i}"
            _run(["ip", "link", "add", RANK_IFNAME, "netns", ns, "type", "veth", "peer",
                  "name", port, "netns", br])
            _run(["ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", RANK_IFNAME])
            _run(["ip", "-n", ns, "link", "set", RANK_IFNAME, "up"])
            _run(["ip", "-n", br, "link", "set", port, "master", "br0"])
            _run(["ip", "-n", br, "link", "set", port, "up"])
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", RANK_IFNAME, *shape])
            _run(["ip", "netns", "exec", br, "tc", "qdisc", "add", "dev", port, *shape])

    def close(self) -> None:
        """Kill started processes, delete every namespace (with its veths and bridge). Safe to
        call more than once; never raises for a part already gone."""
        for proc in self._processes:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._processes:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._processes.clear()
        for ns in reversed(self._created):
            _run(["ip", "netns", "del", ns], check=False)
        self._created.clear()
        self._restore_handlers()
        if self._open:
            self._open = False
            with ShapedNetwork._active_lock:
                if ShapedNetwork._active is self:
                    ShapedNetwork._active = None

    # -- signals -----------------------------------------------------------------------------
    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[signum] = signal.signal(signum, self._on_signal)

    def _restore_handlers(self) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._old_handlers.clear()

    def _on_signal(self, signum, frame) -> None:
        old = self._old_handlers.get(signum, signal.SIG_DFL)
        self.close()  # also restores the old handlers
        if callable(old):
            old(signum, frame)  # e.g. default_int_handler raises KeyboardInterrupt
        elif old == signal.SIG_DFL:
            signal.raise_signal(signum)

    # -- processes ---------------------------------------------------------------------------
    def run_in_namespace(self, rank: int, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """Start ``argv`` inside ``rank``'s namespace (``ip netns exec``); killed on close."""
        if not self._created:
            raise ConfigError("the network is not built; use it as a context manager")
        self._check_rank(rank)
        proc = subprocess.Popen(["ip", "netns", "exec", self.namespaces[rank], *map(str, argv)],
                                **popen_kwargs)
        self._processes.append(proc)
        return proc

    def topology_yaml(self, link_latency_s: float | None = None, rtt_s: float | None = None,
                      name: str | None = None) -> str:
        """The topology preset of this network: see :func:`topology_yaml`."""
        return topology_yaml(self.ranks, self.bandwidth_bytes_per_s, link_latency_s=link_latency_s,
                             rtt_s=rtt_s, name=name)


_PING_SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("ready", flush=True)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    b = c.recv(1)
    if not b:
        break
    c.sendall(b)
"""

_PING_CLIENT = r"""
import socket, statistics, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
samples = []
for i in range(int(sys.argv[3])):
    t = time.perf_counter(); c.sendall(b"x"); c.recv(1); samples.append(time.perf_counter() - t)
c.close()
print(statistics.median(samples[len(samples) // 5:]))
"""


def measure_rtt(net: ShapedNetwork, a: int = 0, b: int = 1, round_trips: int = 200,
                port: int = 47001) -> float:
    """Median round-trip time (s) of a 1-byte TCP ping-pong between ranks ``a`` and ``b``.

    The first fifth of the round trips are dropped as warm-up. What is measured is the whole
    host path (Python, kernel TCP stack, veth, bridge, tbf), i.e. the per-message latency a
    small collective step pays here, not a cable's.
    """
    if net.ranks < 2:
        raise ConfigError("measuring a round trip needs at least 2 ranks")
    server = net.run_in_namespace(b, [sys.executable, "-c", _PING_SERVER, net.address(b),
                                      port], stdout=subprocess.PIPE, text=True)
    try:
        if server.stdout.readline().strip() != "ready":
            raise MeasurementError("the ping-pong server did not start")
        client = net.run_in_namespace(a, [sys.executable, "-c", _PING_CLIENT, net.address(b),
                                          port, round_trips], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        try:
            out, err = client.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            client.kill()
            raise MeasurementError("the ping-pong client did not finish in 30 s") from None
        if client.returncode != 0:
            raise MeasurementError(f"the ping-pong client failed: {err.strip()}")
        return float(out.strip())
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=5)
        if server.stdout is not None:
            server.stdout.close()


#: TCP payload per Ethernet frame as tc meters it: MTU 1500 less the IPv4 (20 B) and TCP (20 B)
#: headers and Linux's timestamp option (12 B) is 1448 B of payload in a 1514 B frame (the
#: 14 B Ethernet header included, as tc counts ``skb->len``). RFC 791, RFC 9293, RFC 7323.
TCP_PAYLOAD_FRACTION = 1448 / 1514


def topology_yaml(hosts: int, bandwidth_bytes_per_s: float, link_latency_s: float | None = None,
                  rtt_s: float | None = None, name: str | None = None) -> str:
    """A clustersim topology preset (builder ``star``) for the shaped network that was built.

    ``link_latency`` is ``rtt_s / 4`` when a measured round trip is given (half the round trip
    is one way, and a star path host -> switch -> host has two links), else ``link_latency_s``,
    else a stated 25 us. ``link_bandwidth`` is the rate at which TCP payload crosses the shaped
    link: tbf meters whole Ethernet frames, and a full frame carries
    :data:`TCP_PAYLOAD_FRACTION` (1448 of 1514 bytes) of payload, while the simulator counts
    payload bytes. The file states both rates.
    """
    if not isinstance(hosts, int) or hosts < 1:
        raise ConfigError(f"hosts must be an integer >= 1, got {hosts!r}")
    rate = tbf_params(bandwidth_bytes_per_s)  # validates the rate
    if rtt_s is not None:
        latency = rtt_s / 4
        how = (f"measured: median TCP ping-pong round trip {format_duration(rtt_s)}; "
               f"one way = RTT/2, split over the 2 links of a star path = RTT/4")
    elif link_latency_s is not None:
        latency, how = float(link_latency_s), "stated by the caller"
    else:
        latency, how = 25e-6, "stated (not measured): a typical veth+bridge one-way time / 2"
    payload_bytes_per_s = bandwidth_bytes_per_s * TCP_PAYLOAD_FRACTION
    bandwidth_text = f"{payload_bytes_per_s * 8:.0f} bps"
    name = name or f"shaped-star-{hosts}x{format_bandwidth(bandwidth_bytes_per_s)}".replace(
        " ", "").replace("/", "p")
    return "\n".join([
        "# Generated by clustersim measure: the network it built and measured on, so that",
        "# 'clustersim collective --topology <this file>' models exactly that network.",
        f"name: {name}",
        "description: >-",
        f"  {hosts} Linux network namespaces on one bridge (one namespace per host), each joined",
        f"  by a veth pair shaped with tc tbf to {format_bandwidth(bandwidth_bytes_per_s)} in each",
        "  direction. Only bandwidth is shaped (no netem); latency is the host stack's.",
        "builder: star",
        "params:",
        f"  hosts: {hosts}",
        f"  # tc shapes Ethernet frames to {format_bandwidth(bandwidth_bytes_per_s)}; TCP payload "
        f"moves at 1448/1514 of that",
        "  # (MTU 1500 - 20 IP - 20 TCP - 12 timestamp option = 1448 B in a 1514 B frame).",
        f"  link_bandwidth: {bandwidth_text}   # {format_bandwidth(payload_bytes_per_s)}",
        f"  # {how}",
        f"  link_latency: {latency * 1e6:.3f} us",
        "  kind: ethernet",
        "sources:",
        f"  - \"tc tbf rate {rate.rate_bits_per_s}bit burst {rate.burst_bytes} limit "
        f"{rate.limit_bytes} on both ends of every veth (simulator/measure/network.py)\"",
        f"  - \"link_latency: {how}\"",
        "",
    ])


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
