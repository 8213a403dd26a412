"""
What a run of a study needs next, read from its folder: finished ('done'), a phase-randomised
evaluation of its checkpoint ('phase'), trained again for a later evaluation ('retrain'),
resumed from its checkpoint ('resume'), started ('start'), or not runnable ('missing'); and the
command line of each.
"""

import json
import os

from lab import paths, studies
from lab.logs import phased, read_log, summarize
from lab.studies import max_iters, phase_modes


def phase_missing(run, phases):
    """The phase modes a finished run of a phase variant still lacks an evaluation in ([] if none)."""
    if run.name not in studies.STUDIES[run.study].get('phase', ()):
        return []
    return [m for m in phase_modes(run.study) if m not in phases]


def next_mode(run, overlay):
    """The first phase mode a finished run still lacks an evaluation in (the first mode if none)."""
    extra = read_log(os.path.join(run.dir, 'log.jsonl'))[2]
    return (phase_missing(run, phased(extra, max_iters(run, overlay))) or phase_modes(run.study))[0]


def context_missing(run):
    """Whether a finished run of a study's `context` list still lacks its lab/longctx.py evaluation."""
    if run.name not in studies.STUDIES[run.study].get('context', ()):
        return False
    try:
        with open(os.path.join(paths.RESULTS, run.study, 'context.json')) as f:
            return run.label not in json.load(f)
    except (OSError, ValueError):
        return True


def state(run, overlay):
    """('missing' | 'done' | 'phase' | 'retrain' | 'resume' | 'start', a line for people)."""
    missing = [f for f in run.configs if not os.path.exists(os.path.join(paths.REPO, f))]
    if missing:
        return 'missing', f"{', '.join(missing)} does not exist (yet): not run"
    try:
        n = max_iters(run, overlay)
    except Exception as e:
        return 'missing', f"config error, not run: {type(e).__name__}: {e}"
    evals, _, extra = read_log(os.path.join(run.dir, 'log.jsonl'))
    if n in evals:
        phase, context = phase_missing(run, phased(extra, n)), context_missing(run)
        if not phase and not context:
            return 'done', f"finished ({n} iters)"
        if os.path.exists(os.path.join(run.dir, 'ckpt.pt')):
            if phase:
                return 'phase', f"finished ({n} iters); its phase-randomised evaluation is to run"
            return 'done', f"finished ({n} iters); its longer contexts are to evaluate: python -m lab.longctx"
        # CPU training is deterministic: the same run again (its log replaced by one equal to round-off)
        # leaves the checkpoint that the later evaluations need
        return 'retrain', f"finished ({n} iters), but no ckpt.pt for its later evaluations: trained again"
    if os.path.exists(os.path.join(run.dir, 'ckpt.pt')):
        return 'resume', f"not finished, last eval at iter {max(evals, default='-')} of {n}; ckpt.pt: resumes"
    if evals:
        return 'start', f"no checkpoint, last eval at iter {max(evals)}: starts afresh"
    old = os.path.join(paths.RESULTS, 'history', run.label)
    return 'start', 'not started' + (f" (an earlier run of it is in {paths.rel(old)})" if os.path.isdir(old) else '')


def summarized(run_dir, n):
    """A run's summary at iter n (logs.summarize); its evaluation set from its log, else from its run.json
    (the runs older than the log's record: lab/provenance.py, derived_eval_set)."""
    s = summarize(*read_log(os.path.join(run_dir, 'log.jsonl')), n)
    if s['done'] and not s.get('eval_set'):
        s['eval_set'] = recorded_eval_set(run_dir)
    return s


def recorded_eval_set(run_dir, row=None):
    """The evaluation set of a run: its eval row's (train.py logs it), else its run.json's; None if neither."""
    if row and row.get('eval_set'):
        return row['eval_set']
    try:
        with open(os.path.join(run_dir, 'run.json')) as f:
            rec = json.load(f)
        return rec.get('eval_set') if isinstance(rec, dict) else None
    except (OSError, ValueError):
        return None


def collect(runs, overlay):
    """[(run, state, detail, summary or None)], {variant: {seed: summary of a finished run}}, leaking
    variants."""
    info, done, leaking = [], {}, set()
    for r in runs:
        st, detail = state(r, overlay)
        s = None
        if st != 'missing':
            s = summarized(r.dir, max_iters(r, overlay))
        info.append((r, st, detail, s))
        done.setdefault(r.name, {})
        if s and s['done']:
            done[r.name][r.seed] = s
        if s and s['leaks']:
            leaking.add(r.name)
    return info, done, leaking


def command(run, overlay, st='start', mode=None):
    """The command of a job: 'start' a run, 'resume' it, 'retrain' it, or its 'phase'-randomised
    evaluation in `mode` (by default the first mode it lacks)."""
    held = st in ('start', 'retrain') and any(os.path.exists(os.path.join(run.dir, f))
                                              for f in ('log.jsonl', 'ckpt.pt'))
    if st == 'phase':           # an evaluation of the run's own checkpoint (lab/phase.py)
        return ['python', '-m', 'lab.phase', f'--out_dir={paths.rel(run.dir)}',
                f'--qk_phase={mode or next_mode(run, overlay)}']
    return (['python', 'train.py', *run.configs, *([overlay] if overlay else []), *run.overrides,
             f'--seed={run.seed}', f'--out_dir={paths.rel(run.dir)}']
            + (['--init_from=resume'] if st == 'resume' else [])
            + (['--overwrite=True'] if held else []))   # a start afresh replaces what an interrupted start left
