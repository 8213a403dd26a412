"""
Where the lab's files are, in one place: the repository (runs start there), its results folder
and the pool of run folders every study shares. Read them as attributes (paths.RESULTS) at the
time of use, so that a test can move them. Also the check every lab command's --out and --png
passes before its work (check_output_file).
"""

import json
import os
import subprocess
import tempfile

from configurator import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository: runs start here
RESULTS = os.path.join(REPO, 'results')
RUNS = os.path.join(RESULTS, 'runs')     # one folder per run, shared by every study


def rel(path):
    """path relative to the repository where it lies inside it, else as it is."""
    p = os.path.relpath(path, REPO)
    return path if p.startswith('..') else p


def at_repo(value, default):
    """A path option's value: its default, relative as --help shows it, lies in the repository; a path
    given on the command line is the user's, relative to where they stand."""
    return os.path.join(REPO, value) if value == default else value


def results_json(*parts):
    """A JSON file under results/ (written by a lab command), or {} where there is none yet."""
    try:
        with open(os.path.join(RESULTS, *parts)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def write_result(name, module, argv, **data):
    """results/<name> as JSON: the command that wrote it (python -m <module> ARGV), then data; says where."""
    path = os.path.join(RESULTS, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(dict(command=' '.join(['python', '-m', module, *argv]), **data), f, indent=1)
    print(f"wrote {rel(path)}")


def check_output_file(path, what, mkdir=True, overwrite=False, ours=None):
    """A file written at the end of the work (--out, --png) can be written there, checked before
    the work: not a folder; unless overwrite, not a file of the repository that git tracks (README.md, a
    committed result), nor where ours(path) is given, a file the command did not write; writable where it
    exists, else its folder writable, or (mkdir: made by the writer) its nearest existing parent. Nothing
    is left there (a probe file is made and removed)."""
    from runtime import nearest_existing      # here: the lab's other paths need no torch
    if os.path.isdir(path):
        raise ConfigError(f"{what}={path} is a folder: name a file")
    repo_file = os.path.exists(path) and not overwrite and tracked(path)      # git asked once
    if repo_file or (os.path.exists(path) and not overwrite and ours and not ours(path)):
        raise ConfigError(f"{what}={path} is " + ("a file of the repository that git tracks" if repo_file else
                          "a file this command did not write") + ": it is replaced only with --overwrite=True")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{what}={path} is not writable: pick another path")
        return
    folder = os.path.dirname(os.path.abspath(path))
    base = nearest_existing(folder)
    if not mkdir and base != folder:
        raise ConfigError(f"{what}={path}: the folder {folder} does not exist")
    if not os.path.isdir(base):
        raise ConfigError(f"{what}={path}: cannot write there, {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}={path}: cannot write there, {base} is not writable; pick another path")
    try:        # access() says yes to root where the file system says no (/proc): a file made and removed
        fd, probe = tempfile.mkstemp(dir=base, prefix='.write-check-')
    except OSError as e:
        raise ConfigError(f"{what}={path}: cannot write in {base} ({e.strerror}); pick another path") from None
    os.close(fd)
    os.remove(probe)


def tracked(path):
    """Whether git tracks path in this repository (False outside it, or without git)."""
    full = os.path.abspath(path)
    if os.path.relpath(full, REPO).startswith('..'):
        return False
    try:
        return subprocess.run(['git', 'ls-files', '--error-unmatch', full], cwd=REPO, capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
