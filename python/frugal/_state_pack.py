"""The user's optimizer and scheduler state in an elastic job's snapshots,
packed fast (Note [Packed user state]).

Note [Packed user state]: an elastic script's model snapshots its torch
optimizer's and schedulers' state_dicts at every check gate, to roll back
to or to send to a joiner. torch.save wrote AdamW's 236 MB for a 25 M
parameter model in 2.7-3.3 s on a loaded 2-core host, through a zip
writer and a BytesIO that doubled its way there, faulting in about 700 MB
of fresh pages per gate. A pack is instead a pickle of the state_dict with
each tensor replaced by its index, then every tensor's raw bytes in that
order, written into a buffer the model keeps from gate to gate: one copy
of each tensor, no new memory once the buffer is large enough. It is read
back only by the same job's workers (a snapshot restored, a joiner's
state), never from disk, so the layout may change between versions; the
pickle is the job's own, as torch.load's would be."""

import pickle
import struct
import warnings

import torch

_MAGIC = b"FRGPACK1"
_HEADER = struct.Struct("<Q")


class _TensorSlot:
    """Where a tensor was in a packed state_dict."""
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return (_TensorSlot, (self.index,))


def _map(obj, is_leaf, leaf):
    """`obj` with leaf(x) for every x in its dicts, lists and tuples that
    is_leaf(x) holds for."""
    if is_leaf(obj):
        return leaf(obj)
    if type(obj) is dict:
        return {k: _map(v, is_leaf, leaf) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_map(v, is_leaf, leaf) for v in obj)
    return obj


def _strip(obj, tensors):
    def slot(t):
        tensors.append(t.detach())
        return _TensorSlot(len(tensors) - 1)
    return _map(obj, lambda o: isinstance(o, torch.Tensor), slot)


def _raw(t):
    """A tensor's bytes as a flat uint8 CPU tensor (a view where it can be)."""
    flat = t.cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() > 0 else torch.empty(0, dtype=torch.uint8)


def pack(state, buffer=None):
    """`state` (a state_dict) packed; written into `buffer` (a bytearray)
    when it is large enough. Returns (memoryview of the pack, the buffer to
    keep for the next pack)."""
    tensors = []
    header = pickle.dumps((_strip(state, tensors), [(str(t.dtype), tuple(t.shape)) for t in tensors]), protocol=4)
    raws = [_raw(t) for t in tensors]
    size = len(_MAGIC) + _HEADER.size + len(header) + sum(r.numel() for r in raws)
    if buffer is None or len(buffer) < size:
        buffer = bytearray(size + size // 4)  # room to grow: AdamW's state appears at the first step
    view = memoryview(buffer)
    offset = len(_MAGIC) + _HEADER.size + len(header)
    view[:offset] = _MAGIC + _HEADER.pack(len(header)) + header
    out = torch.frombuffer(buffer, dtype=torch.uint8, count=size - offset, offset=offset) if size > offset else None
    at = 0
    for r in raws:
        n = r.numel()
        out[at:at + n].copy_(r)
        at += n
    return view[:size], buffer


def _fill_into(obj, tensors, into):
    """`obj` with each tensor slot filled from `tensors` (views of a pack):
    copied into the tensor at the same place of `into` where one of its
    shape and dtype is (Note [Switching in place] in _model.py), else
    cloned."""
    if isinstance(obj, _TensorSlot):
        src = tensors[obj.index]
        if isinstance(into, torch.Tensor) and into.shape == src.shape and into.dtype == src.dtype:
            with torch.no_grad():
                into.copy_(src)
            return into
        return src.clone()
    if type(obj) is dict:
        return {k: _fill_into(v, tensors, into.get(k) if type(into) is dict else None) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        others = into if type(into) is type(obj) and len(into) == len(obj) else [None] * len(obj)
        return type(obj)(_fill_into(v, tensors, o) for v, o in zip(obj, others))
    return obj


def unpack(data, into=None):
    """The state_dict of a pack (bytes or a buffer); a state torch.save wrote
    otherwise. With `into` (the object's current state_dict), a tensor goes
    into the current tensor at its place when that has its shape and dtype,
    so loading it allocates nothing new; the result then shares those
    tensors, and never `data`'s memory."""
    if bytes(data[:len(_MAGIC)]) != _MAGIC:
        import io
        return torch.load(io.BytesIO(bytes(data)), map_location="cpu")
    start = len(_MAGIC) + _HEADER.size
    (length,) = _HEADER.unpack_from(data, len(_MAGIC))
    skeleton, specs = pickle.loads(data[start:start + length])
    offset = start + length
    tensors = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given buffer is not writable": the slices are cloned
        for dtype_name, shape in specs:
            dtype = getattr(torch, dtype_name.split(".", 1)[1])
            n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            raw = torch.frombuffer(data, dtype=torch.uint8, count=n, offset=offset) if n > 0 else \
                torch.empty(0, dtype=torch.uint8)
            tensors.append(raw.view(dtype).reshape(shape))  # a view of data: copied or cloned below
            offset += n
    if offset != len(data):
        raise ValueError(f"a packed state of {len(data)} bytes holds {offset}: damaged")
    return _fill_into(skeleton, tensors, into)
