"""python -m frugal: what this installation of frugal was built with.

Prints the frugal version, the torch it was compiled against and the one
imported now, CUDA, the transport and its security, and where the `frugal`
launcher is. Exits 0 when the package imports and its launcher is present,
1 otherwise (each problem on its own line).
"""

import os
import shutil
import sys


def report():
    problems = []
    lines = []
    try:
        import torch
    except ImportError as e:
        print(f"torch: cannot be imported ({e})")
        return 1
    import frugal
    from frugal import _C, _build_info, _launcher

    lines.append(f"frugal {frugal.__version__} ({os.path.dirname(os.path.abspath(frugal.__file__))})")
    lines.append(f"python {sys.version.split()[0]} ({sys.executable})")
    built, running = _build_info.TORCH_VERSION, torch.__version__
    lines.append(f"torch {running} (built against {built})")
    if built != running:
        problems.append(f"the extension was built against torch {built} but torch {running} is imported: "
                        "reinstall frugal (pip install --no-build-isolation .)")
    if torch.cuda.is_available():
        lines.append(f"cuda: available ({torch.cuda.device_count()} device(s), CUDA {torch.version.cuda})")
    else:
        lines.append(f"cuda: not available (torch built {'with CUDA ' + torch.version.cuda if torch.version.cuda else 'without CUDA'})")
    curve = _C.curve_available()
    lines.append("transport: ZeroMQ (TCP); security: CurveZMQ " +
                 ("available (frugal keys generate; docs/design/security.md)" if curve else
                  "NOT available (libzmq without libsodium): multi-host runs need --insecure"))
    lines.append(f"engine: DistributedModel {'available' if _C.HAVE_REPLICA else 'not built (no replica engine)'}")
    binary = _launcher.binary_path()
    if os.access(binary, os.X_OK):
        lines.append(f"launcher binary: {binary}")
    else:
        problems.append(f"the launcher binary {binary} is missing or not executable")
    on_path = shutil.which("frugal")
    lines.append(f"frugal on PATH: {on_path or 'no (run it as ' + binary + ')'}")
    for line in lines:
        print(line)
    for p in problems:
        print(f"problem: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(report())
