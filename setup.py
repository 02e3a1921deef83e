"""Builds the `frugal` wheel: CMake compiles the extension frugal._C and the
`frugal` CLI against the torch of the Python running this, and setuptools
packs them with the pure-Python package python/frugal.

    python3 -m venv --system-site-packages venv
    venv/bin/pip install --no-build-isolation .

pyproject.toml says why the backend is setuptools rather than
scikit-build-core. What the build reads from the environment:

* FRUGAL_PIP_BUILD_DIR: the CMake build directory (default: build-pip in
  the source tree). It is kept between installs, so a second install
  recompiles only what changed; with ccache (used by the top CMakeLists.txt
  when it is installed) a fresh directory at the same depth as build/ reuses
  the objects `make` compiled.
* FRUGAL_CMAKE_ARGS: more CMake arguments, split as a shell would.
* CMAKE_BUILD_PARALLEL_LEVEL: compile jobs (CMake's own variable).

Tests and benchmarks are not built. The package is laid out by
python/CMakeLists.txt in <build>/python/frugal; this copies the extension and
the binary from there, and writes an _build_info.py that finds the binary
inside the installed package.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))


def require_wheel():
    # setuptools before 70.1 builds wheels through the separate `wheel`
    # package; without it pip only says "invalid command 'bdist_wheel'".
    try:
        import wheel  # noqa: F401
    except ImportError:
        import setuptools
        major_minor = tuple(int(x) for x in re.findall(r"\d+", setuptools.__version__)[:2])
        if major_minor < (70, 1):
            raise RuntimeError(
                f"building frugal with setuptools {setuptools.__version__} needs the 'wheel' package, which "
                f"{sys.executable} cannot import (Debian: apt-get install python3-wheel and make the venv with "
                "--system-site-packages; elsewhere: pip install wheel)") from None


require_wheel()


def project_version():
    # One source of truth: project(frugal VERSION x.y.z) in CMakeLists.txt.
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(\s*frugal\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if match is None:
        raise RuntimeError("no 'project(frugal VERSION ...)' in CMakeLists.txt")
    return match.group(1)


def torch_of_this_python():
    try:
        import torch
        import torch.utils
    except ImportError as e:
        raise RuntimeError(
            f"{sys.executable} cannot import torch ({e}): the frugal extension is built against the installed "
            "torch. Install torch first, then build without isolation: pip install --no-build-isolation .") from None
    return torch.__version__, os.path.dirname(os.path.realpath(torch.__file__)), torch.utils.cmake_prefix_path


def build_dir():
    explicit = os.environ.get("FRUGAL_PIP_BUILD_DIR")
    # Next to build/ (one level under the source tree) by default: ccache
    # (base_dir) rewrites the build's absolute paths relative to the build
    # directory, so only a directory at the same depth as `make`'s build/
    # reuses the objects that build compiled.
    return os.path.abspath(explicit) if explicit else os.path.join(SOURCE_DIR, "build-pip")


def forget_other_torch(build, torch_version, torch_dir):
    # A CMake cache holds the LibTorch it found: an install for another
    # Python or torch configures afresh (the objects stay, for ccache).
    stamp = os.path.join(build, "frugal-pip-torch.txt")
    want = f"{sys.version}\n{torch_version}\n{torch_dir}\n"
    have = open(stamp, encoding="utf-8").read() if os.path.exists(stamp) else None
    if have != want:
        if os.path.exists(os.path.join(build, "CMakeCache.txt")):
            os.remove(os.path.join(build, "CMakeCache.txt"))
        shutil.rmtree(os.path.join(build, "CMakeFiles"), ignore_errors=True)
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(want)


class CMakeBuild(build_ext):
    """Runs CMake for the one Extension, frugal._C, and ships the CLI with it."""

    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            raise RuntimeError("cmake not found on PATH (Debian: apt-get install cmake)")
        torch_version, torch_dir, torch_prefix = torch_of_this_python()
        build = build_dir()
        os.makedirs(build, exist_ok=True)
        forget_other_torch(build, torch_version, torch_dir)
        args = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DFRUGAL_BUILD_TESTS=OFF",
            "-DFRUGAL_BUILD_BENCH=OFF",
            "-DFRUGAL_BUILD_PYTHON=ON",
            # Not resolved: a venv's python finds its packages from its own path.
            f"-DFRUGAL_PYTHON={sys.executable}",
        ]
        if os.path.isdir(os.path.join(torch_prefix, "Torch")):
            # A pip wheel of torch ships LibTorch and its CMake config; Debian's
            # python3-torch does not (its LibTorch is libtorch-dev's, found as usual).
            args.append(f"-DCMAKE_PREFIX_PATH={torch_prefix}")
        extra = shlex.split(os.environ.get("FRUGAL_CMAKE_ARGS", ""))
        if not any(a.startswith("-Dpybind11_DIR") for a in extra):
            try:  # pip's pybind11 (a build requirement); Debian's pybind11-dev is found without it
                import pybind11
                args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
            except ImportError:
                pass
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")) and shutil.which("ninja"):
            args += ["-G", "Ninja"]
        args += extra
        self.announce(f"frugal: CMake build in {build}", level=2)
        subprocess.run(["cmake", "-S", SOURCE_DIR, "-B", build] + args, check=True)
        subprocess.run(["cmake", "--build", build, "--target", "frugal_python"], check=True)

        package = os.path.join(build, "python", "frugal")
        built = [n for n in os.listdir(package) if n.startswith("_C.") and n.endswith(".so")] \
            if os.path.isdir(package) else []
        if not built:
            raise RuntimeError(f"CMake built no extension in {package}: see the 'frugal python package: skipped' "
                               "line of the CMake output above for why")
        binary = os.path.join(build, "frugal")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"CMake built no frugal binary at {binary}")

        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(package, built[0]), target)
        out_package = os.path.dirname(target)
        os.makedirs(os.path.join(out_package, "bin"), exist_ok=True)
        shutil.copy2(binary, os.path.join(out_package, "bin", "frugal"))
        with open(os.path.join(out_package, "_build_info.py"), "w", encoding="utf-8") as f:
            f.write("# Written by setup.py: the frugal binary is installed inside the package.\n"
                    "import os\n"
                    "FRUGAL_BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'bin', 'frugal')\n"
                    f"TORCH_VERSION = {torch_version!r}\n"
                    f"VERSION = {project_version()!r}\n")


# setuptools' own build and egg-info directories go into the CMake build
# directory too, not into build/, where `make` keeps its CMake build.
_setuptools_dir = os.path.join(build_dir(), "setuptools")
os.makedirs(_setuptools_dir, exist_ok=True)

setup(
    version=project_version(),
    packages=["frugal"],
    package_dir={"frugal": "python/frugal"},
    package_data={"frugal": ["py.typed", "*.pyi"]},
    ext_modules=[Extension("frugal._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": _setuptools_dir}, "egg_info": {"egg_base": _setuptools_dir}},
    zip_safe=False,
)
