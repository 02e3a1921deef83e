"""Writes frugal.pth into this Python's user site-packages so that
`import frugal` finds the package in the build tree (an editable install of
the build; remove the file to uninstall). Usage: write_pth.py BUILD/python"""

import os
import site
import sys


def main():
    if len(sys.argv) != 2 or not os.path.isfile(os.path.join(sys.argv[1], "frugal", "__init__.py")):
        sys.exit("usage: write_pth.py BUILD/python (the directory holding the built frugal package)")
    target = os.path.abspath(sys.argv[1])
    site_dir = site.getusersitepackages()
    os.makedirs(site_dir, exist_ok=True)
    path = os.path.join(site_dir, "frugal.pth")
    with open(path, "w") as f:
        f.write(target + "\n")
    print(f"frugal: wrote {path} -> {target}")
    print(f"frugal: {sys.executable} -c 'import frugal' now uses that build; delete the file to undo")


if __name__ == "__main__":
    main()
