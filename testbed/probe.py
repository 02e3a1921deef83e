#!/usr/bin/python3
"""Throughput probe for the testbed: `probe.py serve PORT` in one host,
`probe.py send HOST PORT SECONDS` in another; prints Mbit/s received."""
import socket
import sys
import time


def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    conn, _ = s.accept()
    total = 0
    t0 = time.time()
    while True:
        b = conn.recv(1 << 20)
        if not b:
            break
        total += len(b)
    dt = time.time() - t0
    print("%.1f Mbit/s (%d bytes in %.2f s)" % (total * 8 / dt / 1e6, total, dt))


def send(host, port, seconds):
    for _ in range(50):
        try:
            s = socket.create_connection((host, port))
            break
        except OSError:
            time.sleep(0.1)
    buf = b"x" * (1 << 16)
    end = time.time() + seconds
    while time.time() < end:
        s.sendall(buf)
    s.close()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
