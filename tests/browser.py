#!/usr/bin/env python3
"""Drives headless Chromium through chromedriver (W3C WebDriver over HTTP)
to a page, waits until every listed canvas has drawn points, takes a
screenshot and prints what the page shows as one JSON line.

  browser.py URL SCREENSHOT.png CANVAS_ID[,CANVAS_ID...] [--timeout S]

Starts chromedriver on a free port and stops it (by PID) before exiting.
Prints {"points": {canvas: n}, "flows": rows, "status": text}; exits 1
when the canvases did not all get points in time.
"""
import base64
import json
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"{}").get("value")


PROBE = """
const ids = arguments[0];
const points = {};
for (const id of ids) { const c = document.getElementById(id); points[id] = c ? Number(c.dataset.points || 0) : -1; }
return {points, flows: document.querySelectorAll('#flows tbody tr').length,
        status: document.getElementById('status').textContent};
"""


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    url, shot, ids = argv[1], argv[2], argv[3].split(",")
    timeout = float(argv[argv.index("--timeout") + 1]) if "--timeout" in argv else 30.0
    port = free_port()
    drv = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    sid = None
    try:
        deadline = time.time() + 20
        while True:
            try:
                if call(base, "GET", "/status").get("ready"):
                    break
            except OSError:
                pass
            if time.time() > deadline:
                print("chromedriver did not come up", file=sys.stderr)
                return 1
            time.sleep(0.2)
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1900", "--user-data-dir=/tmp/intswitch-browser-%d" % port]}}}}
        sid = call(base, "POST", "/session", caps)["sessionId"]
        call(base, "POST", f"/session/{sid}/url", {"url": url})
        deadline = time.time() + timeout
        while True:
            seen = call(base, "POST", f"/session/{sid}/execute/sync", {"script": PROBE, "args": [ids]})
            done = all(n > 0 for n in seen["points"].values())
            if done or time.time() > deadline:
                break
            time.sleep(0.5)
        # One more draw after the last tick, then the picture.
        time.sleep(1.0)
        png = base64.b64decode(call(base, "GET", f"/session/{sid}/screenshot"))
        with open(shot, "wb") as f:
            f.write(png)
        print(json.dumps(seen))
        return 0 if done else 1
    finally:
        if sid:
            try:
                call(base, "DELETE", f"/session/{sid}")
            except OSError:
                pass
        drv.terminate()
        try:
            drv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            drv.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
