"""
A study: a named grid of configs x seeds at the CPU study scale (lab/studies.py), run resumably
and summarised in results/<study>/RESULTS.md (and plots, with matplotlib: val curves, final
val, and where the runs learned them the MOPE pairs and the FourierQK periods).

    python -m lab.study --study=ega_mope [--seeds=1337,2,3] [--overlay=config/cpu.py] [--jobs=2]
    python -m lab.study --study=ega_mope --dry_run=True      # what would happen: skip / resume / start
    python -m lab.study --study=ega_mope --table_only=True   # only RESULTS.md and the plots
    python -m lab.study --study=ega_mope --table_only=True --replace=True   # even where the table would hold less
    python -m lab.status [--write=True]      # every study's finished runs: README's status table
    python -m lab.replay --run=RUN --steps=250   # re-train a committed run's first steps

A run is `python train.py CONFIGS OVERLAY [OVERRIDES] --seed=S --out_dir=results/runs/<run>-s<S>`
(its output in run.txt, its command and max_iters in run.json). Finished runs (an eval at
max_iters in log.jsonl) are skipped, those with a ckpt.pt resume, others start afresh.
A study can name variants whose finished checkpoints get more evaluations with random q, k
phases, one per mode of PHASE_MODES (`python -m lab.phase`, logged as eval_only rows).
A table never silently replaces the existing one with less (fewer seeds of a variant, a run counted at
fewer steps, another scale): it says why in one line and writes nothing, unless --replace=True;
without one finished run it writes nothing.
--seeds replaces every run's seeds; --overlay= (empty) runs without one; with --jobs > 1
each run gets OMP_NUM_THREADS=1. Ctrl-C or SIGTERM sends each run one SIGTERM (it saves
a checkpoint and stops; the next call resumes it); a second one makes them leave at once.
"""

import os
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from lab import cli, paths, studies
from lab.runner import run_study
from lab.tables import Refused, write_results


def defaults():
    return dict(study='', seeds='', overlay=studies.DEFAULT_OVERLAY, jobs=2, dry_run=False, table_only=False,
                replace=False)


def options(argv):
    """The command line as the runner's options: study, seeds (a list, or None: each run's own), overlay,
    jobs, dry_run, table_only, replace."""
    c = cli.load(defaults(), argv, {'study': tuple(studies.STUDIES)})
    if not c['study']:
        raise ConfigError(f"name a study: --study=NAME, one of: {', '.join(studies.STUDIES)}")
    seeds = [x.strip() for x in c['seeds'].split(',')] if c['seeds'] else []
    if not all(x.isdigit() and int(x) < 2 ** 32 - 64 for x in seeds):      # train.py's range
        raise ConfigError(f"--seeds={c['seeds']}: expected integers in [0, 2^32 - 64), comma-separated")
    if c['dry_run'] and c['table_only']:
        raise ConfigError("--dry_run=True says what would run; --table_only=True writes the table: choose one")
    if c['jobs'] < 1:
        raise ConfigError(f"--jobs={c['jobs']}: expected an integer >= 1")
    if c['overlay'] and not os.path.isfile(os.path.join(paths.REPO, c['overlay'])):
        raise ConfigError(f"--overlay={c['overlay']}: expected an existing file (or --overlay= for none)")
    c['seeds'] = list(dict.fromkeys(int(x) for x in seeds)) or None
    return c


def main(argv):
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, defaults(), {'study': tuple(studies.STUDIES)}))
        return 0
    try:
        opts = options(argv)
    except ConfigError as e:
        return cli.fail(e)
    study = opts['study']
    runs = studies.plan(study, opts['seeds'], opts['overlay'])
    if not opts['table_only']:
        return run_study(study, runs, opts, argv)
    try:
        path = write_results(study, runs, opts, argv)
    except Refused as e:
        return cli.fail(e, 1)
    if path:
        print(f"wrote {paths.rel(path)}")
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:         # `python -m lab.study ... --dry_run=True | head`: no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
