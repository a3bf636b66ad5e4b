#!/bin/sh
# Install strata-doctor from this clone into its own virtual environment (README.md, "Set up").
#
#   sh install.sh           as root, or as a user with sudo: /opt/strata-doctor, with the
#                           command linked as /usr/local/bin/strata-doctor
#   sh install.sh --user    without root: ~/.local/strata-doctor, linked as ~/.local/bin/strata-doctor
#
# The one prerequisite is Python 3.9+ with its venv module (Debian and Ubuntu: the package
# python3-venv, which brings python3). When it is missing, root installs it with apt-get (a
# user through sudo). The package is built from a copy of the source in a temporary folder,
# so nothing is written into the clone: a root install leaves no root-owned build/ or
# *.egg-info behind to break a later user's `pip install -e .`.
set -eu

say() { echo "strata-doctor install: $*" >&2; }
die() { say "$*"; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
[ -f "$here/pyproject.toml" ] && [ -d "$here/doctor" ] || die "$here is not a strata-doctor clone (no pyproject.toml or doctor/)"

mode=system
case "${1:-}" in
    "") ;;
    --user) mode=user ;;
    *) die "unknown option '$1' (use no option, or --user)" ;;
esac

uid=$(id -u)
if [ "$mode" = system ] && [ "$uid" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 ||
        die "installing into /opt/strata-doctor needs root: run it as root (su -c 'sh install.sh'), or 'sh install.sh --user'"
    exec sudo -H sh "$here/install.sh"
fi

venv_ok() {
    command -v python3 >/dev/null 2>&1 && python3 -c 'import ensurepip, venv, sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null
}

if ! venv_ok; then
    command -v apt-get >/dev/null 2>&1 ||
        die "python3 with its venv module (Python 3.9 or later) is missing, and there is no apt-get to install it"
    if [ "$uid" -eq 0 ]; then
        as_root=
    elif command -v sudo >/dev/null 2>&1; then
        as_root=sudo
    else
        die "python3 -m venv is missing: as root, run apt-get install python3-venv (then this again)"
    fi
    say "installing python3-venv with apt-get"
    $as_root apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends python3-venv >/dev/null ||
        die "apt-get install python3-venv failed"
    venv_ok || die "python3 -m venv still does not work after installing python3-venv"
fi

if [ "$mode" = system ]; then
    prefix=/opt/strata-doctor
    link=/usr/local/bin/strata-doctor
else
    prefix=${HOME:?}/.local/strata-doctor
    link=$HOME/.local/bin/strata-doctor
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/strata-doctor-install.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# What the wheel is built from, and nothing else (no .git, no .venv, no build leftovers):
# pyproject's package-dir folders, docs/checks among them (the pages explain prints).
mkdir -p "$scratch/src/docs"
for part in pyproject.toml README.md doctor checks templates docs/checks; do
    cp -R "$here/$part" "$scratch/src/$part"
done
find "$scratch/src" -name __pycache__ -prune -exec rm -rf {} +

# --clear: the prefix holds this install alone, and a rerun may come with another Python
# (a venv made by one cannot be re-made in place by another).
python3 -m venv --clear "$prefix" || die "python3 -m venv $prefix failed"
# Quiet: pip's errors still show, its progress does not.
PIP_DISABLE_PIP_VERSION_CHECK=1 "$prefix/bin/pip" install -q "$scratch/src" ||
    die "pip install into $prefix failed (see pip's message above)"
mkdir -p "$(dirname "$link")"
ln -sf "$prefix/bin/strata-doctor" "$link"
say "installed $link -> $prefix/bin/strata-doctor"

# A system-wide install is for every user, but its virtual environment runs the Python it
# was made with: one below a folder only its owner may enter (root's pyenv in /root) leaves
# the command to root alone. Say so rather than leave others a bare "Permission denied".
if [ "$mode" = system ]; then
    interpreter=$(readlink -f "$prefix/bin/python3")
    dir=$(dirname "$interpreter")
    while [ "$dir" != / ]; do
        if [ -z "$(find "$dir" -maxdepth 0 -perm -o=x)" ]; then
            say "warning: only root can run it: its Python, $interpreter, is below $dir, which other users may not enter; for every user, run this again with the system's python3 first on PATH (PATH=/usr/bin:\$PATH sh install.sh)"
            break
        fi
        dir=$(dirname "$dir")
    done
fi
