#!/usr/bin/env python3
"""A stand-in for the tracker's HTTP side, for working on the dashboard's page alone (a
development tool, not a test): serves tracker/assets/ as the tracker does (/ and
/assets/...), and a made-up state document at /api/state and as server-sent `state`
events at /api/stream, once a second, with sessions whose curves grow, devices that come
and go and a queue. Run: python3 tests/dashboard/mock_tracker.py [--port 8765] [--devices 1000]
and open http://127.0.0.1:8765/. The real documents are built by the tracker
(tracker/src/dashboard_state.cpp, docs/dashboard.md); this one follows the same fields.
"""
import argparse
import json
import math
import pathlib
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ASSETS = pathlib.Path(__file__).resolve().parents[2] / "tracker" / "assets"
CSP = "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:"


class World:
    def __init__(self, devices):
        self.started = time.time()
        self.lock = threading.Lock()
        self.rng = random.Random(16)
        keys = ["rpi4", "jetson-orin", "x86-avx2", "<b>odd&key</b>"]
        self.devices = []
        for i in range(devices):
            key = keys[i % len(keys)] if devices > 4 else keys[i % 3]
            self.devices.append({
                "id": i + 1, "key": key, "name": f"{key}-{i:04d}", "address": f"10.0.{i // 250}.{i % 250}:51{i % 1000:03d}",
                "caps": {"triple": "aarch64-linux-gnu" if key != "x86-avx2" else "x86_64-linux-gnu",
                         "arch": "aarch64" if key != "x86-avx2" else "x86_64",
                         "cpu": "Cortex-A72" if key == "rpi4" else "AMD EPYC 9654" if key == "x86-avx2" else "Cortex-A78AE",
                         "cores": 4 if key != "x86-avx2" else 2, "memory_bytes": 8 << 30,
                         "features": ["neon", "asimd"] if key != "x86-avx2" else ["avx2", "fma", "f16c"],
                         "gpus": [{"backend": "cuda", "name": "Orin", "version": "sm_87"}] if key == "jetson-orin" else []},
            })
        self.jobs = [self.make_job(0, "gemm 512x512x512", 2000), self.make_job(1, "conv2d resnet18.layer3", 800)]

    def make_job(self, index, label, budget):
        return {"job": index, "label": label, "op": label.split()[0], "workload": label.split()[1], "strategy": "sa",
                "target": "aarch64", "key": "rpi4", "phase": "tuning", "trials": 0, "budget": budget, "this_session": 0,
                "best_gflops": 0.0, "default_gflops": 3.2 + index, "best_config": "", "elapsed_ms": 0,
                "failures": {}, "finished": False, "curve": []}

    def step(self):
        with self.lock:
            for job in self.jobs:
                if job["finished"]:
                    continue
                job["trials"] += self.rng.randint(4, 16)
                job["this_session"] = job["trials"]
                job["elapsed_ms"] += 1000
                candidate = (8 + 10 * job["job"]) * (1 - math.exp(-job["trials"] / 300)) * self.rng.uniform(0.85, 1.0)
                if candidate > job["best_gflops"]:
                    job["best_gflops"] = round(candidate, 3)
                    job["best_config"] = f"tile_m={self.rng.choice([8, 16, 32])} tile_n={self.rng.choice([8, 16, 32])} unroll=4"
                job["curve"].append([job["trials"], job["elapsed_ms"], job["best_gflops"]])
                job["curve"] = job["curve"][-512:]
                if self.rng.random() < 0.3:
                    status = self.rng.choice(["compile_error", "timeout", "wrong_result"])
                    job["failures"][status] = job["failures"].get(status, 0) + 1
                if job["trials"] >= job["budget"]:
                    job["finished"] = True
                    job["phase"] = "finished"

    def state(self):
        with self.lock:
            now = time.time()
            busy_ids = {d["id"] for d in self.devices[:2]}
            devices = []
            for d in self.devices:
                busy = d["id"] in busy_ids
                devices.append(dict(d, state="busy" if busy else "free", lease_id=100 + d["id"] if busy else None,
                                    holder="kestrel tune (127.0.0.1:4444)" if busy else None,
                                    heartbeat_age_ms=self.rng.randint(0, 2500), connected_ms=int((now - self.started) * 1000)))
            keys = {}
            for d in devices:
                k = keys.setdefault(d["key"], {"key": d["key"], "free": 0, "busy": 0, "queued": 0})
                k[d["state"]] += 1
            waiting = [{"client": "kestrel profile (127.0.0.1:5555)", "request_id": 7, "priority": 10, "waited_ms": 4200},
                       {"client": "kestrel tune <script>alert(1)</script>", "request_id": 3, "priority": -5, "waited_ms": 9100}]
            keys[devices[0]["key"]]["queued"] = len(waiting) if devices else 0
            trials = sum(j["trials"] for j in self.jobs)
            return {
                "tracker": {"version": "0.16", "uptime_ms": int((now - self.started) * 1000), "address": "127.0.0.1:9190",
                            "tls": True, "auth": True, "connections": len(devices) + 2, "clients": 2,
                            "devices": len(devices), "leases": 1, "queued": len(waiting), "grants": 5,
                            "trials_per_second": 10.5, "snapshot_ms": 0.21},
                "pool": {"keys": list(keys.values()), "devices": devices,
                         "queues": [{"key": devices[0]["key"], "waiting": waiting}] if devices else []},
                "sessions": [{"id": "7/host:1234:1", "client": "kestrel tune (127.0.0.1:4444)",
                              "state": "running" if not all(j["finished"] for j in self.jobs) else "finished",
                              "started_ms_ago": int((now - self.started) * 1000), "updated_ms_ago": 300,
                              "jobs": [dict(j) for j in self.jobs]},
                             {"id": "5/laptop:99:1", "client": "kestrel tune (10.0.0.9:5000)", "state": "finished",
                              "started_ms_ago": 3600000, "updated_ms_ago": 600000,
                              "jobs": [dict(self.make_job(i, label, 64), trials=64, this_session=64, best_gflops=5.0 + i,
                                            phase="done", finished=True, elapsed_ms=90000,
                                            curve=[[8 * k, 11000 * k, 1.0 + i + 0.5 * k] for k in range(1, 9)])
                                       for i, label in enumerate(["dense resnet18.fc", "conv2d resnet18.layer1.0.conv1",
                                                                  "conv2d resnet18.layer2.0.conv1"])]}],
                "events": [{"t_ms_ago": 1000 * i + 300, "kind": k, "text": t} for i, (k, t) in enumerate([
                    ("session_start", "session 7/host:1234:1 of kestrel tune (127.0.0.1:4444) started"),
                    ("join", "device rpi4-0001 joined key rpi4"),
                    ("loss", "device rpi4-0009 left key rpi4: heartbeat silent for 10 s"),
                    ("requeue", "request 3 of kestrel tune requeued after its lease's device was lost"),
                    ("join", "device <img src=x onerror=alert(1)> joined key x86-avx2")])],
                "_trials": trials,
            }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--devices", type=int, default=12)
    args = parser.parse_args()
    world = World(args.devices)

    def ticker():
        while True:
            time.sleep(1)
            world.step()
    threading.Thread(target=ticker, daemon=True).start()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def headers_common(self, status, content_type, length=None):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()

        def do_GET(self):
            path = self.path.split("?")[0]
            files = {"/": ("dashboard.html", "text/html; charset=utf-8"),
                     "/assets/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
                     "/assets/dashboard.css": ("dashboard.css", "text/css; charset=utf-8")}
            if path in files:
                body = (ASSETS / files[path][0]).read_bytes()
                self.headers_common(200, files[path][1], len(body))
                self.wfile.write(body)
            elif path == "/api/state":
                body = json.dumps(world.state()).encode()
                self.headers_common(200, "application/json", len(body))
                self.wfile.write(body)
            elif path == "/api/stream":
                self.headers_common(200, "text/event-stream")
                try:
                    while True:
                        self.wfile.write(b"event: state\ndata: " + json.dumps(world.state()).encode() + b"\n\n")
                        self.wfile.flush()
                        time.sleep(1)
                except (BrokenPipeError, ConnectionResetError):
                    return
            else:
                body = b'{"error":"not found"}'
                self.headers_common(404, "application/json", len(body))
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"mock tracker dashboard at http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
