#!/usr/bin/python3
"""Runs inside the test guest from a systemd oneshot unit; not imported on the host.

Reads ``/strata-test/steps.json`` (a list of ``{"name", "cmd", "timeout"}``), runs each
``cmd`` with bash in order, and records its exit status, output and duration.  Steps
may leave files in ``$OUT`` (``/out/files``).  Everything under ``/out`` is then sent
to the host as a base64 gzip tar on the second serial port (``/dev/ttyS1``) between
two marker lines, and the guest is powered off at once (its root is a RAM disk:
there is nothing to save, and a clean shutdown only costs time).
"""

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
import termios
import time

STEPS = "/strata-test/steps.json"
OUT = "/out"
PORT = "/dev/ttyS1"
BEGIN = b"\n===STRATA-VM-RESULT-BEGIN===\n"
END = b"\n===STRATA-VM-RESULT-END===\n"


def log(msg: str) -> None:
    print(f"strata-vm-runner: {msg}", flush=True)


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        return f"<{exc}>"


def run_steps() -> None:
    files = os.path.join(OUT, "files")
    os.makedirs(files, exist_ok=True)
    info = {
        "uptime_at_start": float(read("/proc/uptime").split()[0]),
        "kernel": os.uname().release,
        "cmdline": read("/proc/cmdline").strip(),
    }
    try:
        with open(STEPS, encoding="utf-8") as f:
            steps = json.load(f)
    except OSError as exc:
        steps = []
        info["error"] = f"no steps: {exc}"
    env = dict(os.environ, OUT=files, PYTHONDONTWRITEBYTECODE="1")
    results = []
    for step in steps:
        log(f"step {step['name']}")
        started = time.monotonic()
        try:
            proc = subprocess.run(
                ["/bin/bash", "-c", step["cmd"]],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=step.get("timeout", 300),
                env=env,
                cwd="/strata-test",
            )
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            out = exc.stdout or b""
            err = (exc.stderr or b"") + b"\n<step timed out>\n"
        results.append(
            {
                "name": step["name"],
                "cmd": step["cmd"],
                "rc": rc,
                "stdout": out.decode("utf-8", "replace"),
                "stderr": err.decode("utf-8", "replace"),
                "seconds": round(time.monotonic() - started, 2),
            }
        )
        log(f"step {step['name']} rc={rc} in {results[-1]['seconds']}s")
    info["uptime_at_end"] = float(read("/proc/uptime").split()[0])
    with open(os.path.join(OUT, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"info": info, "steps": results}, f, indent=1)


def send() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(OUT, arcname="out")
    payload = base64.encodebytes(buf.getvalue())
    fd = os.open(PORT, os.O_WRONLY | os.O_NOCTTY)
    try:
        attrs = termios.tcgetattr(fd)
        attrs[1] &= ~termios.OPOST  # no \n -> \r\n translation
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
        for chunk in (BEGIN, payload, END):
            view = memoryview(chunk)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        termios.tcdrain(fd)
    finally:
        os.close(fd)
    log(f"sent {len(payload)} bytes of results")


def main() -> int:
    try:
        run_steps()
    except Exception as exc:  # keep going: the host needs whatever there is
        with open(os.path.join(OUT, "runner-error.txt"), "w", encoding="utf-8") as f:
            f.write(repr(exc))
    send()
    power_off()
    return 0


def power_off() -> None:
    os.sync()
    try:
        with open("/proc/sysrq-trigger", "w") as f:
            f.write("o")
        time.sleep(30)
    except OSError as exc:
        log(f"sysrq power-off failed: {exc}")
    subprocess.run(["systemctl", "poweroff", "--force", "--force"], check=False)


if __name__ == "__main__":
    sys.exit(main())
