"""The `frugal` command of an installed package: runs the frugal CLI binary
shipped inside the package (frugal/bin/frugal), or the build tree's."""

import os
import sys


def binary_path():
    """Path of the frugal CLI binary this package was built with."""
    override = os.environ.get("FRUGAL_BINARY")
    if override:
        return override
    from . import _build_info
    return _build_info.FRUGAL_BINARY


def main():
    binary = binary_path()
    if not os.access(binary, os.X_OK):
        sys.stderr.write(f"frugal: the frugal binary {binary} is missing or not executable; reinstall the package "
                         "(pip install --no-build-isolation .) or set FRUGAL_BINARY\n")
        return 2
    # exec, not a child process: signals, the exit code and the process that
    # `frugal run` supervises stay the binary's own.
    os.execv(binary, [binary] + sys.argv[1:])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
