"""The hub side of a benchmark: one Daphne, or N Daphne processes behind Debian's nginx
configured exactly as `scripts/serve --hubs N` configures it (scripts/hubs.sh writes the
config), so the figures are those of the shipped topology."""

import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import hubclients

ROOT = Path(__file__).resolve().parent.parent
WS_LIMIT = "33792"  # the hub's MAX_MESSAGE_SIZE + 1 KiB, as scripts/serve sets it


def daphne_argv(port: int, root: Path = ROOT) -> list[str]:
    argv = [str(Path(sys.executable).with_name("daphne")), "-b", "127.0.0.1", "-p", str(port)]
    argv += ["--websocket-max-frame-size", WS_LIMIT, "--websocket-max-message-size", WS_LIMIT]
    return [*argv, "project.asgi:application"]


def free_run(count: int) -> int:
    """A port P with P..P+count free (the balancer on P, the hubs above it)."""
    for _ in range(100):
        base = hubclients.free_port()
        if base + count < 65536 and all(_free(base + i) for i in range(1, count + 1)):
            return base
    raise RuntimeError(f"no {count + 1} consecutive free ports")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


async def start(
    hubs: int, env: dict[str, str], stack: contextlib.AsyncExitStack
) -> tuple[int, list[int], list[int]]:
    """Start the hubs; (the port clients use, Daphne pids, nginx pids)."""
    if hubs == 1:
        port = hubclients.free_port()
        daphne = await hubclients.Service.start(
            "daphne", daphne_argv(port), env, "Listening on TCP address"
        )
        stack.push_async_callback(daphne.stop)
        return port, [daphne.proc.pid], []
    port = free_run(hubs)
    pids = []
    for i in range(1, hubs + 1):
        daphne = await hubclients.Service.start(
            f"daphne{i}", daphne_argv(port + i), env, "Listening on TCP address"
        )
        stack.push_async_callback(daphne.stop)
        pids.append(daphne.proc.pid)
    directory = Path(tempfile.mkdtemp(prefix="bench-nginx-"))
    stack.callback(shutil.rmtree, directory, True)
    script = f'source scripts/hubs.sh && write_nginx_config "{directory}"'
    variables = {"ROOT": str(ROOT), "host": "127.0.0.1", "port": str(port), "hubs": str(hubs)}
    subprocess.run(["bash", "-c", script], cwd=ROOT, env={**env, **variables}, check=True)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    argv = [nginx, "-e", str(directory / "error.log"), "-p", str(directory)]
    proc = await asyncio.create_subprocess_exec(*argv, "-c", str(directory / "nginx.conf"))
    stack.push_async_callback(hubclients.stop_process, proc)
    for _ in range(500):  # until nginx listens (its workers are its children)
        if not _free(port):
            break
        await asyncio.sleep(0.01)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return port, pids, [proc.pid, *map(int, children)]
