"""
Where the lab's files are, in one place: the repository (runs start there), its results folder
and the pool of run folders every study shares. Read them as attributes (paths.RESULTS) at the
time of use, so that a test can move them.
"""

import json
import os

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
