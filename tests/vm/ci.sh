#!/usr/bin/env bash
# Run the real-kernel (vm) tests in CI when this machine can, or say plainly why not.
#
#   tests/vm/ci.sh            # from the repository root
#
# Exit status: 0 when the tests passed or were skipped (the reason is printed),
# non-zero when a test failed or the run went past its time budget.
#
# Environment:
#   STRATA_VM=skip            do not run them (exit 0, says so)
#   STRATA_VM=require         fail instead of skipping when the machine cannot run them
#   STRATA_VM_BUDGET=SECONDS  wall-clock limit for image build + tests (default 1500)
#   STRATA_VM_CACHE=DIR       where the guest image is cached (default ~/.cache/strata-doctor-vm)
#   STRATA_VM_MIRROR=URL      Debian mirror (default: the one apt uses on this machine)
#   PYTHON=python3            the interpreter that has pytest and the project installed
set -u

cd "$(dirname "$0")/../.." || exit 2
PYTHON=${PYTHON:-python3}
BUDGET=${STRATA_VM_BUDGET:-1500}
MIRROR=${STRATA_VM_MIRROR:-$("$PYTHON" tests/vm/guest.py mirror 2>/dev/null)}
SUITE=${STRATA_VM_SUITE:-bookworm}
started=$(date +%s)

say() { echo "vm tests: $*"; }

skip() {
    if [ "${STRATA_VM:-}" = require ]; then
        say "cannot run: $* (STRATA_VM=require)"
        exit 1
    fi
    say "SKIPPED: $*"
    exit 0
}

if [ "${STRATA_VM:-}" = skip ]; then
    skip "STRATA_VM=skip"
fi
[ "$(uname -s)" = Linux ] || skip "not Linux"
[ "$(uname -m)" = x86_64 ] || skip "not an x86_64 machine ($(uname -m))"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    fi
fi

# Install what is missing, if apt-get can (root or passwordless sudo).
missing=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v cpio >/dev/null 2>&1 || missing+=(cpio)
if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        skip "missing ${missing[*]} and no apt-get to install them"
    fi
    if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
        skip "missing ${missing[*]}; installing them needs root or passwordless sudo"
    fi
    say "installing ${missing[*]}"
    if ! { "${SUDO[@]}" apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
               "${missing[@]}" >/dev/null; }; then
        skip "apt-get could not install ${missing[*]}"
    fi
fi
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 is not available"
if ! qemu-system-x86_64 -machine q35 -device help 2>/dev/null | grep -q pxb-pcie; then
    skip "this qemu-system-x86_64 has no pxb-pcie device (needed for a GPU on a NUMA node)"
fi

"$PYTHON" -c 'import pytest' 2>/dev/null || skip "$PYTHON has no pytest (pip install -e '.[test]')"

# A cached guest image needs neither the mirror nor root; building one needs both.
key=$("$PYTHON" tests/vm/guest.py key) || { say "cannot compute the guest image key"; exit 2; }
cache=${STRATA_VM_CACHE:-$HOME/.cache/strata-doctor-vm}
if [ -f "$cache/image-$key/image.json" ]; then
    say "guest image $key is cached in $cache"
else
    if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
        skip "no cached guest image, and building one (debootstrap) needs root or passwordless sudo"
    fi
    [ -n "$MIRROR" ] || skip "no cached guest image and no Debian mirror configured for apt"
    if ! "$PYTHON" - "$MIRROR/dists/$SUITE/Release" <<'EOF'
import sys
import urllib.request

try:
    with urllib.request.urlopen(sys.argv[1], timeout=15) as r:
        r.read(64)
except Exception as exc:
    print(f"vm tests: {sys.argv[1]}: {exc}")
    sys.exit(1)
EOF
    then
        skip "no cached guest image and the Debian mirror ($MIRROR) is not reachable"
    fi
    say "building guest image $key (debootstrap from $MIRROR, about 2-3 minutes)"
    if ! timeout "$BUDGET" "${SUDO[@]}" env STRATA_VM_CACHE="$cache" "$PYTHON" tests/vm/guest.py build; then
        say "FAILED: could not build the guest image"
        exit 1
    fi
fi

left=$((BUDGET - ($(date +%s) - started)))
if [ "$left" -lt 300 ]; then
    say "FAILED: only ${left}s of the ${BUDGET}s budget left for the tests"
    exit 1
fi
artifacts=${STRATA_VM_ARTIFACTS:-tests/vm/artifacts}
say "running (budget ${left}s; artifacts in $artifacts/)"
STRATA_VM_CACHE="$cache" timeout --signal=INT --kill-after=30 "$left" \
    "$PYTHON" -m pytest -m vm tests/vm -q -p no:cacheprovider
rc=$?
if [ $rc -eq 124 ]; then
    say "FAILED: the tests ran past the ${left}s budget"
fi
elapsed=$(($(date +%s) - started))
if [ $rc -eq 0 ]; then
    say "passed in ${elapsed}s"
elif [ $rc -eq 5 ]; then
    say "FAILED: no vm tests were collected"
    rc=1
else
    say "FAILED (exit $rc) after ${elapsed}s; see $artifacts/ for the guest consoles"
fi
exit $rc
