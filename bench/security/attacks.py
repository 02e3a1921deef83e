#!/usr/bin/env python3
"""What a stranger on the network sends to a Frugal job's ports, one attempt
per invocation, run inside the stranger's namespace by hostile_peer.py.
Prints one JSON line describing the attempt and what came back.

    attacks.py raw tcp://10.77.1.2:41234 --seed 1        # 100 KB random, HTTP, ZMTP 1.0-shaped bytes
    attacks.py zmq tcp://10.77.1.2:41234 [--key K --server-key Z85]   # forged Frugal messages
    attacks.py replay tcp://10.77.1.2:41234 --stream FILE             # a captured client byte stream
"""
import argparse
import json
import os
import random
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zmq_client import read_key_file, send_as_stranger  # noqa: E402


def host_port(endpoint):
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    return host, int(port)


def tcp_exchange(endpoint, payload, read_s=2.0, chunk=16384, pause_s=0.0, pieces=None, paused=1 << 30):
    """Connects, writes PAYLOAD (in CHUNK pieces; or as the list PIECES), the
    first PAUSED of them PAUSE_S apart, reads what comes back for READ_S seconds. Returns a dict:
    bytes sent, received, and how the connection ended."""
    out = {"sent": 0, "received": 0, "end": "open"}
    try:
        s = socket.create_connection(host_port(endpoint), timeout=3)
    except OSError as e:
        return dict(out, end="connect failed: %s" % e)
    s.settimeout(0.2)
    try:
        for i, piece in enumerate(pieces or [payload[i:i + chunk] for i in range(0, len(payload), chunk)]):
            s.sendall(piece)
            out["sent"] += len(piece)
            if not _drain(s, out):
                return out
            if i < paused:
                time.sleep(pause_s)
        deadline = time.time() + read_s
        while time.time() < deadline and _drain(s, out):
            pass
    except OSError as e:
        out["end"] = "reset by the job (%s)" % e.__class__.__name__
    finally:
        s.close()
    return out


def _drain(s, out):
    """Adds what the peer sent (waiting up to the socket's timeout) to
    out["received"]; False once the peer has closed the connection."""
    while True:
        try:
            data = s.recv(65536)
        except socket.timeout:
            return True
        if not data:
            out["end"] = "closed by the job"
            return False
        out["received"] += len(data)


def zmtp10_garbage(rng):
    # A ZMTP 1.0 length byte then random bytes: what used to abort libzmq 4.3.4
    # on a socket without a ZAP domain (docs/design/security.md, Note [No ZMTP 1.0]).
    return bytes([0xFF]) + struct.pack(">Q", 1 << 40) + bytes(rng.getrandbits(8) for _ in range(2000))


def raw(args):
    rng = random.Random(args.seed)
    attempts = {"random_100KB": bytes(rng.getrandbits(8) for _ in range(100_000)),
                "http_get": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                "zmtp10_shaped": zmtp10_garbage(rng)}
    return [dict(attack="raw:" + k, target=args.endpoint, **tcp_exchange(args.endpoint, v))
            for k, v in attempts.items()]


def forged_messages():
    """Three-frame messages shaped like Frugal's (a header with its magic,
    payload); a stranger that got past the handshake would deliver these."""
    header = b"FRGL" + struct.pack("<HHiiq", 1, 1, 0, 3, 7) + bytes(32)
    return [[b"", header, bytes(1024)], [header], [b"x"] * 4]


def zmq_attempt(args):
    curve = None
    if args.key:
        public, secret = read_key_file(args.key)
        curve = (public, secret, args.server_key)
    events = send_as_stranger(args.endpoint, forged_messages(), curve=curve, wait_s=args.wait_s)
    kind = "zmq:curve_wrong_key" if curve else "zmq:plaintext"
    # Distinct monitor events in first-seen order (libzmq retries refused
    # connections every 100 ms), and how many TCP connections were made.
    return [{"attack": kind, "target": args.endpoint, "events": list(dict.fromkeys(events)),
             "connections": events.count("connected"), "delivered": "handshake_succeeded" in events}]


def zmtp_pieces(data, frames=4, chunk=4096):
    """DATA (a ZMTP 3 client stream) cut as the real client sent it: the
    signature, the rest of the greeting, then one piece per frame for the
    first FRAMES frames (HELLO, INITIATE, ...), then CHUNK-byte pieces."""
    pieces, at = [data[:10], data[10:64]], 64
    for _ in range(frames):
        if at + 2 > len(data):
            break
        flags = data[at]
        size, head = (struct.unpack(">Q", data[at + 1:at + 9])[0], 9) if flags & 0x02 else (data[at + 1], 2)
        pieces.append(data[at:at + head + size])
        at += head + size
    return pieces + [data[i:i + chunk] for i in range(at, len(data), chunk)]


def replay(args):
    data = open(args.stream, "rb").read()
    # Piece by piece, 0.3 s apart, so that the job answers the greeting and
    # HELLO before the next command arrives, as it did for the real client.
    r = tcp_exchange(args.endpoint, data, read_s=2.0, pause_s=0.3, pieces=zmtp_pieces(data), paused=6)
    return [dict(attack="replay", target=args.endpoint, stream=os.path.basename(args.stream),
                 stream_bytes=len(data), **r)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["raw", "zmq", "replay"])
    p.add_argument("endpoint")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--key", help="this stranger's CURVE key pair file (zmq)")
    p.add_argument("--server-key", help="the job's public key it claims to know (zmq)")
    p.add_argument("--stream", help="captured byte stream (replay)")
    p.add_argument("--wait-s", type=float, default=3.0)
    args = p.parse_args()
    for rec in {"raw": raw, "zmq": zmq_attempt, "replay": replay}[args.kind](args):
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
