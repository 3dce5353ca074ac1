"""`preflight`: the cluster's rendezvous before any model is loaded. Every node runs it with the
environment `serve` would get (DIST_INIT_ADDR, NNODES, NODE_RANK): rank 0 holds a TCP store on
DIST_INIT_ADDR, every rank checks in with its world size, then a gloo all-reduce over CPU (and
an NCCL one where a GPU is present) proves the ranks reach each other. One JSON line on stdout:
what this node saw; exit 1 when it failed (refused, timeout, wrong world size)."""

from __future__ import annotations

import datetime
import json
import os
import threading
import time


def _fail(kind: str, detail: str, **known: object) -> dict:
    return {"ok": False, "error": kind, "detail": detail, **known}


def _classify(error: BaseException) -> str:
    text = str(error).lower()
    if "refused" in text:
        return "refused"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    return type(error).__name__


def run(*, timeout: float) -> dict:
    try:
        host, _, port = os.environ["DIST_INIT_ADDR"].rpartition(":")
        world, rank = int(os.environ["NNODES"]), int(os.environ["NODE_RANK"])
    except (KeyError, ValueError) as error:
        return _fail("settings", f"DIST_INIT_ADDR (host:port), NNODES and NODE_RANK are needed: {error}")
    seen = {"rank": rank, "world": world, "addr": f"{host}:{port}"}
    try:
        import torch
        import torch.distributed as dist
    except ImportError as error:
        return _fail("torch", f"the image has no torch: {error}", **seen)
    wait = datetime.timedelta(seconds=timeout)
    start = time.monotonic()
    _watchdog(timeout + 5, seen)
    try:
        store = dist.TCPStore(host, int(port), world_size=None, is_master=rank == 0, timeout=wait,
                              wait_for_workers=False)
        if rank == 0:
            store.set("world", str(world))
        store.set(f"rank/{rank}", str(world))
        theirs = int(store.get("world").decode())
        if theirs != world:
            return _fail("world size", f"rank 0 runs with NNODES={theirs}, this node with {world}", **seen)
        store.wait([f"rank/{other}" for other in range(world)], wait)
        sizes = {other: int(store.get(f"rank/{other}").decode()) for other in range(world)}
        if wrong := {other: size for other, size in sizes.items() if size != world}:
            return _fail("world size", f"ranks with another NNODES: {wrong}", **seen)
        dist.init_process_group("gloo", store=store, world_size=world, rank=rank, timeout=wait)
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        result = {"ok": total.item() == world * (world + 1) / 2, "gloo_sum": total.item(), **seen}
        if torch.cuda.is_available():
            group = dist.new_group(backend="nccl")
            on_gpu = torch.tensor([float(rank + 1)], device="cuda")
            dist.all_reduce(on_gpu, group=group)
            result["nccl_sum"] = on_gpu.item()
            result["ok"] = result["ok"] and on_gpu.item() == total.item()
        dist.barrier()
        dist.destroy_process_group()
        result["seconds"] = round(time.monotonic() - start, 2)
        return result
    except Exception as error:  # what this node saw is the report: refused, timeout, ...
        return _fail(_classify(error), str(error).strip().splitlines()[0] if str(error).strip() else repr(error),
                     **seen)


def _watchdog(seconds: float, seen: dict) -> None:
    """A connection to something that is no torch store (a port another program holds) never
    answers and never times out in torch: past `seconds`, report the timeout and end the process."""
    def fire() -> None:
        print(json.dumps(_fail("timeout", f"no rendezvous within {seconds:g} s: is DIST_INIT_ADDR the head's "
                                          "address, with a port nothing else holds?", **seen)), flush=True)
        os._exit(1)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def main(*, timeout: float) -> int:
    result = run(timeout=timeout)
    print(json.dumps(result), flush=True)
    return 0 if result.get("ok") else 1
