#!/usr/bin/env python3
"""Training traffic for kvroute's profile-guided build (deploy/build-release.sh).

Drives a kvroute (in front of kvroute-sim) with agent-like sessions, so the
profile records which code paths real traffic takes: OpenAI completions and
chat completions, streamed and not, over keep-alive connections; prompts that
share a system prompt and grow turn by turn (warm, medium and, now and then,
heavy ones); JSON with escapes and non-ASCII text both escaped and raw; a
session header on some requests; now and then a request the proxy refuses.

It is deliberately not bench/perf's workload (fixed bodies, one nginx
upstream answering fixed files): a build trained on the benchmark it is then
measured with would flatter itself.

    python3 deploy/pgo-train.py --url http://127.0.0.1:8000 --requests 4000

Standard library only. Every request's status is checked: the run fails when
more than 1% of the requests that should succeed do not, so a broken training
setup cannot pass silently (the profile would describe error paths).
"""

import argparse
import http.client
import json
import random
import sys
import threading
import urllib.parse

WORDS = (
    "the of and to in is that for it as with was on be by at this from are or an have not but "
    "kernel cache tensor decode prefill batch latency token model layer block shard router "
    "request stream engine queue worker buffer socket thread index prefix chunk hash memory "
    "def return class import self None True False for while if else elif try except raise "
    "int float str list dict set tuple len range print open with yield lambda async await"
).split()
# Text that JSON escapes: newlines, tabs, quotes, backslashes, non-ASCII.
SPICE = ["\n", "\n    ", "\t", '"', "\\", "é", "—", "→", "日本", "ü", "{", "}", "()", ":"]


def text(rng, tokens):
    out = []
    for _ in range(tokens):
        w = rng.choice(WORDS)
        if rng.random() < 0.08:
            w += rng.choice(SPICE)
        out.append(w)
    return " ".join(out)


class Session:
    def __init__(self, rng, system, sid):
        self.rng = rng
        self.system = system
        self.sid = sid
        # Most tasks are small (WARM/MEDIUM); a few start heavy (>= 20k tokens).
        heavy = rng.random() < 0.04
        self.turns = [text(rng, rng.randint(22000, 26000) if heavy else rng.randint(50, 3000))]

    def next_turn(self):
        self.turns.append(text(self.rng, self.rng.randint(20, 400)))  # the model's answer
        self.turns.append(text(self.rng, self.rng.randint(50, 1500)))  # a tool's output


def request_for(rng, model, s):
    """Returns (path, body bytes, headers, should_succeed)."""
    headers = {"Content-Type": "application/json"}
    if rng.random() < 0.5:
        headers["X-Session-Id"] = s.sid
    stream = rng.random() < 0.5
    if rng.random() < 0.6:
        path = "/v1/chat/completions"
        msgs = [{"role": "system", "content": s.system}]
        for i, t in enumerate(s.turns):
            msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": t})
        body = {"model": model, "messages": msgs, "max_tokens": rng.randint(4, 48),
                "stream": stream}
    else:
        path = "/v1/completions"
        body = {"model": model, "prompt": s.system + "\n" + "\n".join(s.turns),
                "max_tokens": rng.randint(4, 48), "stream": stream}
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    if rng.random() < 0.3:
        body["temperature"] = round(rng.random(), 2)
    raw = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode()
    if rng.random() < 0.01:  # a body the proxy must refuse with a 400
        return path, raw[: len(raw) // 2], headers, False
    return path, raw, headers, True


def read_response(conn):
    resp = conn.getresponse()
    data = resp.read()  # whole body: JSON, or every SSE event up to [DONE]
    return resp.status, data


def worker(args, model, systems, seed, counts, lock):
    rng = random.Random(seed)
    url = urllib.parse.urlsplit(args.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    sessions = []
    while True:
        with lock:
            if counts["sent"] >= args.requests:
                break
            counts["sent"] += 1
        if not sessions or rng.random() < 0.25:
            sessions.append(Session(rng, rng.choice(systems), f"s{seed}-{len(sessions)}"))
            if len(sessions) > 8:
                sessions.pop(0)
        s = rng.choice(sessions)
        path, body, headers, ok_expected = request_for(rng, model, s)
        try:
            conn.request("POST", path, body=body, headers=headers)
            status, _ = read_response(conn)
        except (OSError, http.client.HTTPException):
            status = 0  # reconnects below
        with lock:
            if ok_expected:
                counts["expected_ok"] += 1
                counts["ok"] += 1 if status == 200 else 0
            else:
                counts["refused"] += 1 if 400 <= status < 500 else 0
        if status != 200:
            conn.close()  # an error or a dropped connection: start afresh
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        if ok_expected and status == 200 and rng.random() < 0.7:
            s.next_turn()
        if len(s.turns) > 24:
            sessions.remove(s)
    conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="kvroute's base URL")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default="", help="default: first of GET /v1/models")
    args = ap.parse_args()
    model = args.model
    if not model:
        u = urllib.parse.urlsplit(args.url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        c.request("GET", "/v1/models")
        status, data = read_response(c)
        if status != 200:
            sys.exit(f"pgo-train: GET /v1/models answered {status}")
        model = json.loads(data)["data"][0]["id"]
    counts = {"sent": 0, "expected_ok": 0, "ok": 0, "refused": 0}
    lock = threading.Lock()
    # The shared system prompts (400-4,900 words), the same for every client.
    systems = [text(random.Random(args.seed * 31 + k), 400 + 1500 * k) for k in range(4)]
    threads = [threading.Thread(target=worker,
                                args=(args, model, systems, args.seed * 1000 + i, counts, lock))
               for i in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"pgo-train: {counts['sent']} requests, {counts['ok']}/{counts['expected_ok']} "
          f"answered 200, {counts['refused']} bad bodies refused")
    if counts["ok"] < 0.99 * counts["expected_ok"]:
        sys.exit("pgo-train: too many failed requests; the profile would describe errors")


if __name__ == "__main__":
    main()
