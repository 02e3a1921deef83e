"""A stranger's ZeroMQ client, through ctypes on the system's libzmq (no
pyzmq needed): a DEALER that connects with no security or as a CURVE client
with a key of its choosing, sends a few messages, and reports what its
socket monitor saw (handshake succeeded or failed, disconnects).
Used by bench/security/hostile_peer.py; standard library only."""
import ctypes
import ctypes.util
import struct
import time

ZMQ_PAIR, ZMQ_DEALER = 0, 5
ZMQ_SNDMORE, ZMQ_DONTWAIT = 2, 1
ZMQ_LINGER, ZMQ_RCVTIMEO, ZMQ_SNDTIMEO = 17, 27, 28
ZMQ_CURVE_PUBLICKEY, ZMQ_CURVE_SECRETKEY, ZMQ_CURVE_SERVERKEY = 48, 49, 50
EVENTS = {0x1: "connected", 0x2: "connect_delayed", 0x4: "connect_retried", 0x80: "closed",
          0x200: "disconnected", 0x800: "handshake_failed_no_detail", 0x1000: "handshake_succeeded",
          0x2000: "handshake_failed_protocol", 0x4000: "handshake_failed_auth"}
ZMQ_EVENT_ALL = 0xFFFF


def _lib():
    lib = ctypes.CDLL(ctypes.util.find_library("zmq") or "libzmq.so.5")
    lib.zmq_ctx_new.restype = ctypes.c_void_p
    lib.zmq_socket.restype = ctypes.c_void_p
    lib.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
    for name in ("zmq_connect", "zmq_socket_monitor", "zmq_close", "zmq_setsockopt", "zmq_send", "zmq_recv"):
        getattr(lib, name).restype = ctypes.c_int
    lib.zmq_connect.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.zmq_socket_monitor.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.zmq_close.argtypes = [ctypes.c_void_p]
    lib.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    lib.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    lib.zmq_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.zmq_ctx_term.argtypes = [ctypes.c_void_p]
    return lib


def read_key_file(path):
    """(public, secret) Z85 strings of a `frugal keys generate` file."""
    keys = {}
    for line in open(path):
        if "=" in line:
            k, v = line.split("=", 1)
            keys[k.strip()] = v.strip().strip('"')
    return keys["public-key"], keys["secret-key"]


def send_as_stranger(endpoint, messages, curve=None, wait_s=3.0):
    """Connects a DEALER to ENDPOINT (CURVE=(public, secret, server_public) Z85
    strings, or None for no security), queues MESSAGES (lists of bytes frames)
    without blocking, waits WAIT_S seconds and returns the monitor's event names
    in order. Nothing is delivered unless "handshake_succeeded" is among them."""
    lib = _lib()
    ctx = ctypes.c_void_p(lib.zmq_ctx_new())
    sock = ctypes.c_void_p(lib.zmq_socket(ctx, ZMQ_DEALER))

    def setopt(opt, value):
        if isinstance(value, int):
            v = ctypes.c_int(value)
            lib.zmq_setsockopt(sock, opt, ctypes.byref(v), ctypes.sizeof(v))
        else:
            lib.zmq_setsockopt(sock, opt, value, len(value))

    setopt(ZMQ_LINGER, 0)
    if curve:
        public, secret, server = (k.encode() for k in curve)
        setopt(ZMQ_CURVE_PUBLICKEY, public)
        setopt(ZMQ_CURVE_SECRETKEY, secret)
        setopt(ZMQ_CURVE_SERVERKEY, server)
    mon_addr = ("inproc://mon-%d" % id(sock)).encode()
    lib.zmq_socket_monitor(sock, mon_addr, ZMQ_EVENT_ALL)
    mon = ctypes.c_void_p(lib.zmq_socket(ctx, ZMQ_PAIR))
    v = ctypes.c_int(200)
    lib.zmq_setsockopt(mon, ZMQ_RCVTIMEO, ctypes.byref(v), ctypes.sizeof(v))
    lib.zmq_connect(mon, mon_addr)
    lib.zmq_connect(sock, endpoint.encode())
    for frames in messages:
        for i, f in enumerate(frames):
            lib.zmq_send(sock, f, len(f), ZMQ_DONTWAIT | (ZMQ_SNDMORE if i + 1 < len(frames) else 0))
    events, buf = [], ctypes.create_string_buffer(4096)
    deadline = time.time() + wait_s
    while time.time() < deadline:
        n = lib.zmq_recv(mon, buf, 4096, 0)
        if n < 6:
            continue
        event = struct.unpack("<H", buf.raw[:2])[0]
        lib.zmq_recv(mon, buf, 4096, 0)  # second frame: the endpoint
        events.append(EVENTS.get(event, hex(event)))
    lib.zmq_close(sock)
    lib.zmq_close(mon)
    lib.zmq_ctx_term(ctx)
    return events
