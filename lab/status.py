"""
Every study's finished runs (an eval at max_iters in its committed log) and phase-randomised
evaluations, each study at its own scale: results/README.md's status table.

    python -m lab.status                     # print the table
    python -m lab.status --write=True        # write it between results/README.md's status markers
    python -m lab.status --write=True --dry_run=True   # say whether it would be written; write nothing

It is not written over a table with more finished runs or phase evaluations of a study
(status_less) unless --replace=True.
"""

import os
import re
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from lab.readme import read_block, write_block
from lab import cli, paths, studies
from lab.logs import read_log, summarize

STATUS = ('<!-- status: python -m lab.status --write=True -->', '<!-- /status -->')


def status_md():
    """results/README.md's status table, from the committed logs: each study at its own scale (the
    CPU study scale, or the paper's for study paper), linking its RESULTS.md where there is one."""
    out = ['| study | scale | runs finished / planned | phase evaluations | results |', '|---|---|---|---|---|']
    for study, spec in studies.STUDIES.items():
        overlay = spec.get('overlay', studies.DEFAULT_OVERLAY)
        runs = studies.plan(study, overlay=overlay)
        sums = [summarize(*read_log(os.path.join(r.dir, 'log.jsonl')), studies.max_iters(r, overlay)) for r in runs]
        done = [r for r, s in zip(runs, sums) if s['done']]
        phase = spec.get('phase', ())
        modes = studies.phase_modes(study)
        want = [(r, m) for r in runs if r.name in phase for m in modes]
        have = sum(m in s.get('phase', {}) for r, s in zip(runs, sums) if s['done'] for m in modes if r.name in phase)
        d = os.path.relpath(studies.results_dir(study, dict(overlay=overlay, seeds=None)), paths.RESULTS)
        exists = os.path.exists(os.path.join(paths.RESULTS, d, 'RESULTS.md'))
        link = f"[{d}/RESULTS.md]({d}/RESULTS.md)" if exists else '-'
        scale = 'CPU study' if overlay == studies.DEFAULT_OVERLAY else studies.scale_tag(overlay)
        out.append(f"| `{study}` | {scale} | {len(done)} / {len(runs)}{': complete' if len(done) == len(runs) else ''}"
                   f" | {f'{have} / {len(want)}' if want else '-'} | {link} |")
    return '\n'.join(out)


def status_counts(block):
    """{study: (finished runs, phase evaluations)} from a status table."""
    out = {}
    for line in block.splitlines():
        m = re.match(r"\| `([^`]+)` \| (?:[^|]+ \| )?(\d+) / \d+[^|]*\| (?:(\d+) / \d+|-) \|", line)
        if m:
            out[m[1]] = (int(m[2]), int(m[3] or 0))
    return out


def status_less(old, new):
    """Why the status table `new` holds less than `old`, the one in README ('' if it does not). Less is a
    study with fewer finished runs, or fewer phase evaluations, than the old table gives it (a study gone
    from the table counts 0); more planned runs with as many finished are not less."""
    now = status_counts(new)
    for study, (runs, phase) in status_counts(old).items():
        runs2, phase2 = now.get(study, (0, 0))
        for what, a, b in (('finished runs', runs, runs2), ('phase evaluations', phase, phase2)):
            if b < a:
                return (f"results/README.md's status table has {a} {what} of {study}; this one would have {b}. Finish "
                        f"the runs (python -m lab.study --study={study} --dry_run=True says which), or pass "
                        f"--replace=True")
    return ''


def main(argv):
    defaults = dict(write=False, replace=False, dry_run=False)
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, defaults))
        return 0
    try:
        c = cli.load(defaults, argv)
        if (c['replace'] or c['dry_run']) and not c['write']:
            raise ConfigError("--replace=True and --dry_run=True go with --write=True")
    except ConfigError as e:
        return cli.fail(e)
    table = status_md()
    if not c['write']:
        print(table)
        return 0
    readme = os.path.join(paths.RESULTS, 'README.md')
    try:
        text, a, b = read_block(readme, STATUS)
    except ConfigError as e:            # README.md without the markers
        return cli.fail(e)
    why = '' if c['replace'] else status_less(text[a:b].strip('\n'), table)
    if why:
        return cli.fail(why, 1)
    if c['dry_run']:
        print(table + '\n(a dry run: results/README.md would get this status table; nothing written)')
        return 0
    write_block(readme, STATUS, table)
    print('wrote the status table in results/README.md')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
