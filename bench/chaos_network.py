"""The chaos soak's network (bench/chaos.py): one fault proxy (tests/support/proxy.py) per
process and dependency, so that a fault can reach the worker's PostgreSQL without the
hub's, or one Daphne's Redis alone. Its own process, so that forwarding every byte of
the run does not share a GIL with the traffic and the fault schedule.

    python bench/chaos_network.py REDIS_PORT POSTGRES_PORT[,POSTGRES_PORT] NAME...

Prints one JSON line, {NAME: {"redis": [port], "postgresql": [port, ...]}}: the ports
each named process connects to instead of the servers' (a proxy per server: with a
primary and a standby, `--failover`, a process names both in its multi-host URL). Then
reads one JSON command a line and answers one JSON line each:

    {"cmd": "silence"|"partition"|"heal"|"cut"|"restore", "targets": [[NAME, DEP], ...]}
    {"cmd": "delay", "targets": [...], "seconds": 0.1}

silence: the open connections go silent for good (new ones work); partition: every byte
and new connection held until heal; cut: connections dropped (FIN/RST) and new ones
refused until restore; delay: seconds added each way. The answer counts the flows that
were open ({"flows": n}). Ends at end of input, closing every connection.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.proxy import TcpProxy

DEPENDENCIES = ("redis", "postgresql")


def main() -> None:
    redis_ports, postgres_ports, *names = sys.argv[1:]
    upstream = {
        "redis": [int(p) for p in redis_ports.split(",")],
        "postgresql": [int(p) for p in postgres_ports.split(",")],
    }
    proxies = {
        (name, dep): [TcpProxy(port) for port in upstream[dep]]
        for name in names
        for dep in DEPENDENCIES
    }
    ports = {
        name: {dep: [proxy.port for proxy in proxies[name, dep]] for dep in DEPENDENCIES}
        for name in names
    }
    print(json.dumps(ports), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        targets = [proxy for name, dep in command["targets"] for proxy in proxies[name, dep]]
        flows = sum(proxy.open_flows() for proxy in targets)
        for proxy in targets:
            match command["cmd"]:
                case "silence":
                    proxy.silence()
                case "partition":
                    proxy.partition()
                case "heal":
                    proxy.heal()
                case "cut":
                    proxy.cut()
                case "restore":
                    proxy.restore()
                case "delay":
                    proxy.delay = float(command["seconds"])
                case other:
                    raise SystemExit(f"chaos_network: unknown command {other!r}")
        print(json.dumps({"flows": flows}), flush=True)
    for group in proxies.values():
        for proxy in group:
            proxy.close()


if __name__ == "__main__":
    main()
