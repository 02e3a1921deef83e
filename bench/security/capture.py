#!/usr/bin/env python3
"""Records the TCP byte streams sent TO one address, as seen on an interface
(an AF_PACKET socket; run it as root inside the receiving host's network
namespace). On SIGTERM, SIGINT or after --seconds it writes, for each
connection whose SYN it saw, the client's bytes from the first one on
(reassembled by sequence number, at most --max-bytes) to
OUT/stream-<src>-<sport>-<dport>.bin, and an index OUT/streams.json.
bench/security/hostile_peer.py replays such a stream. Standard library only.

    ip netns exec fgtb-h1 bench/security/capture.py --iface eth0 --dst 10.77.1.2 --out DIR
"""
import argparse
import json
import os
import signal
import socket
import struct
import time

ETH_P_ALL = 0x0003


def parse(frame, dst):
    """(src, sport, dport, seq, syn, payload) of a TCP/IPv4 Ethernet frame to DST, else None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 6 or socket.inet_ntoa(ip[16:20]) != dst:
        return None
    total = struct.unpack("!H", ip[2:4])[0]
    tcp = ip[ihl:total]
    if len(tcp) < 20:
        return None
    sport, dport, seq = struct.unpack("!HHI", tcp[:8])
    off = (tcp[12] >> 4) * 4
    return socket.inet_ntoa(ip[12:16]), sport, dport, seq, bool(tcp[13] & 0x02), bytes(tcp[off:])


def reassemble(isn, segments, max_bytes):
    """The contiguous bytes from ISN + 1 on, at most MAX_BYTES."""
    out, next_seq = bytearray(), (isn + 1) & 0xFFFFFFFF
    while len(out) < max_bytes:
        data = segments.get(next_seq)
        if not data:
            break
        out += data
        next_seq = (next_seq + len(data)) & 0xFFFFFFFF
    return bytes(out[:max_bytes])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iface", default="eth0")
    p.add_argument("--dst", required=True, help="record connections to this IPv4 address")
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--max-bytes", type=int, default=1 << 20)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((args.iface, 0))
    s.settimeout(0.5)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    conns = {}  # (src, sport, dport) -> {"isn": int or None, "segments": {seq: bytes}, "bytes": int}
    deadline = time.time() + args.seconds
    with open(os.path.join(args.out, "ready"), "w"):
        pass
    while not stop and time.time() < deadline:
        try:
            frame = s.recv(1 << 18)
        except (socket.timeout, InterruptedError):
            continue
        got = parse(frame, args.dst)
        if not got:
            continue
        src, sport, dport, seq, syn, payload = got
        c = conns.setdefault((src, sport, dport), {"isn": None, "segments": {}, "bytes": 0})
        if syn:
            c["isn"] = seq
        elif payload and c["isn"] is not None and c["bytes"] < args.max_bytes and seq not in c["segments"]:
            c["segments"][seq] = payload
            c["bytes"] += len(payload)
    index = []
    for (src, sport, dport), c in conns.items():
        if c["isn"] is None:
            continue
        data = reassemble(c["isn"], c["segments"], args.max_bytes)
        name = "stream-%s-%d-%d.bin" % (src, sport, dport)
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
        index.append({"file": name, "src": src, "sport": sport, "dport": dport, "bytes": len(data)})
    with open(os.path.join(args.out, "streams.json"), "w") as f:
        json.dump(index, f, indent=1)


if __name__ == "__main__":
    main()
