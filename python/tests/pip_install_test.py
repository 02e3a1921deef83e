"""The installed package, as a user gets it: a fresh venv (with the system's
site packages, for a system torch), `pip install --no-build-isolation
--no-deps SOURCE`, `python -m frugal`, and an own script on 2 workers
through the installed `frugal` launcher.

    pip_install_test.py --source DIR --work DIR --build-dir DIR [--python PY]

The venv is made anew under --work every run; the CMake build directory
(--build-dir, passed as FRUGAL_PIP_BUILD_DIR) is kept, so after the first run
an install recompiles only what changed, and ccache serves the objects of a
build of the same sources at the same directory depth.
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time


def run(cmd, env, timeout, what, cwd=None):
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    print(f"{what}: exit {proc.returncode} in {time.monotonic() - start:.1f} s", flush=True)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout[-6000:])
        sys.stdout.write(proc.stderr[-6000:])
        raise SystemExit(f"FAIL: {what} exited {proc.returncode}: {' '.join(cmd)}")
    return proc


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAIL: {message}")


def own_script(launcher, py, script, out_dir, version, venv, env, cwd, flags):
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    proc = run([launcher, "run", "--workers", "2", "--timeout-s", "60", *flags, "--", py, script, out_dir], env, 600,
               f"frugal run --workers 2 {' '.join(flags[:1])} (own script)", cwd=cwd)
    print(proc.stdout, end="")
    results = []
    for r in range(2):
        path = os.path.join(out_dir, f"rank{r}.json")
        check(os.path.exists(path), f"rank {r} wrote no result ({path})")
        with open(path) as f:
            results.append(json.load(f))
    for r, res in enumerate(results):
        check((res["rank"], res["world_size"]) == (r, 2), f"rank {r} joined as {res['rank']} of {res['world_size']}")
        check(res["frugal_file"].startswith(os.path.realpath(venv) + "/"),
              f"rank {r} imported frugal from {res['frugal_file']}, not the venv")
        check(res["version"] == version, f"rank {r}: frugal.__version__ {res['version']!r}")
        check(math.isfinite(res["last_loss"]) and res["last_loss"] < res["first_loss"],
              f"rank {r}: loss {res['first_loss']} -> {res['last_loss']} did not decrease")
    check(results[0]["checksum"] == results[1]["checksum"], "the ranks ended with different replica checksums")
    check(results[0]["params"] == results[1]["params"], "the ranks ended with different parameters")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--build-dir", required=True)
    p.add_argument("--python", default="/usr/bin/python3")
    args = p.parse_args()
    source, work = os.path.abspath(args.source), os.path.abspath(args.work)
    venv = os.path.join(work, "venv")
    shutil.rmtree(venv, ignore_errors=True)
    os.makedirs(work, exist_ok=True)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRUGAL_BINARY", "PYTHONHOME")}
    env["FRUGAL_PIP_BUILD_DIR"] = os.path.abspath(args.build_dir)
    env["PIP_NO_INDEX"] = "1"  # never reach for a package index
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    run([args.python, "-m", "venv", "--system-site-packages", venv], env, 300, "venv")
    py, launcher = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "frugal")
    run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", source], env, 3000, "pip install")
    check(os.access(launcher, os.X_OK), f"pip installed no {launcher}")

    # From outside the source tree, so nothing can come from python/ or build/.
    doctor = run([py, "-m", "frugal"], env, 120, "python -m frugal", cwd=work)
    print(doctor.stdout, end="")
    with open(os.path.join(source, "CMakeLists.txt")) as f:
        version = re.search(r"project\(\s*frugal\s+VERSION\s+([0-9.]+)", f.read()).group(1)
    check(doctor.stdout.startswith(f"frugal {version} "), f"python -m frugal does not report version {version}")
    check(f"{venv}/lib/" in doctor.stdout, "python -m frugal does not report the venv's package")
    check("transport: ZeroMQ" in doctor.stdout, "python -m frugal reports no transport")
    check(re.search(r"launcher binary: .*/site-packages/frugal/bin/frugal", doctor.stdout),
          "python -m frugal does not find the launcher inside the installed package")

    # The stubs declare every public name of the built extension.
    run([py, "-c", (
        "import os, re, frugal, frugal._C as C\n"
        "d = os.path.dirname(frugal.__file__)\n"
        "assert os.path.exists(os.path.join(d, 'py.typed')), 'py.typed not installed'\n"
        "stub = open(os.path.join(d, '_C.pyi')).read()\n"
        "declared = set(re.findall(r'^(?:class|def) (\\w+)|^(\\w+):', stub, re.M))\n"
        "declared = {a or b for a, b in declared}\n"
        "missing = sorted(n for n in dir(C) if not n.startswith('__') and n not in declared)\n"
        "print('undeclared in _C.pyi:', missing)\n"
        "raise SystemExit(1 if missing else 0)\n")], env, 120, "stubs", cwd=work)

    version_out = run([launcher, "version"], env, 60, "frugal version").stdout
    check(version_out.startswith(f"frugal {version}"), f"frugal version printed {version_out!r}")

    script = os.path.join(source, "python", "tests", "pip_own_script.py")
    own_script(launcher, py, script, os.path.join(work, "own-script"), version, venv, env, work, [])

    # The same with keys, as across sites (CurveZMQ on every connection).
    keys = os.path.join(work, "keys")
    shutil.rmtree(keys, ignore_errors=True)
    os.makedirs(keys)
    run([launcher, "keys", "generate", "--out", os.path.join(keys, "site.key")], env, 60, "frugal keys generate")
    shutil.copy(os.path.join(keys, "site.key.pub"), os.path.join(keys, "authorized_keys"))
    own_script(launcher, py, script, os.path.join(work, "own-script-keys"), version, venv, env, work,
               ["--key", os.path.join(keys, "site.key"), "--authorized-keys", os.path.join(keys, "authorized_keys")])
    print("PASS")


if __name__ == "__main__":
    main()
