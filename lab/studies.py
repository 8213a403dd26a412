"""
The studies as data: each a named grid of configs x seeds at the CPU study scale (STUDIES), and
what a run of one is: its folder, its scale, its config as train.py will see it, its length.
"""

import ast
import functools
import json
import os
from typing import NamedTuple

from lab import paths

S5, S3, S2 = (1337, 2, 3, 4, 5), (1337, 2, 3), (1337, 2)
LONG = ('dot', 'fox', 'causal_gauss', 'fourier_qk_causal')     # study long's variants, dot first
# the locality study's best combination, which studies long and paper carry beside the single priors:
# the lowest mean final val among its combinations with 3 seeds (set by hand from results/locality/RESULTS.md;
# 2026-12-01: fox_mope_rel, then ega_fox and fox_dconv, none clear of fox beyond the seed spread)
AGREE = ('dot', 'fox', 'ega', 'mope_rel', 'causal_gauss', 'conv', 'fourier_qk_causal')  # study agree
BEST = ('fox_mope_rel', ['config/fox.py'], ['--pos=mope_rel'])
STUDIES = {
    # runs: (run name, config files, extra --key=value, seeds); refs: what every causal variant
    # is compared with, paired over seeds; causal: each leaking variant's causal counterpart
    'ega_mope': dict(
        runs=[('dot', ['config/dot.py'], [], S5), ('ega', ['config/ega.py'], [], S5),
              ('mope', ['config/mope.py'], [], S5), ('ega_mope', ['config/ega_mope.py'], [], S5),
              ('ega_paper', ['config/ega_paper.py'], [], S3),
              ('ega_mope_paper', ['config/ega_mope_paper.py'], [], S3)],
        refs=['dot'], causal={'ega_paper': 'ega', 'ega_mope_paper': 'ega_mope'},
        # (both, one, other, neither): does the pair add? ab - a - b + base, per seed
        interactions=[('ega_mope', 'ega', 'mope', 'dot')]),
    'gates': dict(
        runs=[(name + suffix, [f'config/{name}.py'], ov, S5)      # the configs' own pos is 'learned'
              for name in ('dot', 'ega', 'fox', 'ega_fox') for suffix, ov in (('', []), ('_nopos', ['--pos=none']))],
        refs=['dot', 'fox', 'dot_nopos', 'fox_nopos'], causal={},
        interactions=[('ega_fox', 'ega', 'fox', 'dot'), ('ega_fox_nopos', 'ega_nopos', 'fox_nopos', 'dot_nopos')]),
    # flux and phase sit on the Morlet gate: measured against dot and against ega_morlet (the gate
    # alone); the structured priors (daub, ega_morlet_fixed) against the learned gates ega, ega_morlet
    'ablations': dict(
        runs=[(name, [f'config/{name}.py'], [], S3) for name in
              ('dot', 'conv', 'conv_paper', 'scale_init', 'ega_morlet', 'flux', 'phase', 'daub', 'mope_rel',
               'ega', 'ega_morlet_fixed')],
        refs=['dot', 'ega', 'ega_morlet'], causal={}),
    # the leaking forms are measured against their causal relative, or against dot where they
    # have none (random_qk, qk_orthogonal, qk_gaussian, fnet); phase: the trained checkpoints whose q, k
    # spectra are re-phased at random in more evaluations (lab/phase.py, each of PHASE_MODES)
    'fourierqk': dict(
        runs=[(name, [f'config/{name}.py'], [], S3) for name in
              ('dot', 'fourier_qk_causal', 'causal_gauss', 'causal_morlet', 'fourier_qk', 'multi_fourier_qk',
               'random_qk', 'qk_orthogonal', 'fnet', 'morlet_xcorr', 'causal_mexhat', 'mexhat_qk', 'qk_gaussian')],
        refs=['dot'], phase=['fourier_qk', 'multi_fourier_qk'],
        causal={'fourier_qk': 'fourier_qk_causal', 'multi_fourier_qk': 'fourier_qk_causal',
                'morlet_xcorr': 'causal_morlet', 'mexhat_qk': 'causal_mexhat', 'random_qk': 'dot',
                'qk_orthogonal': 'dot', 'qk_gaussian': 'dot', 'fnet': 'dot'}),
    # the authors' weight-decay recipe (train.py --decay_all=True: every parameter decayed) against ours
    # (matrices and MOPE's pairs), on the variants whose gates, pairs and bands it reaches; each pair
    # (with, without) is compared over the same seeds
    'decay': dict(
        runs=[(name + suffix, [f'config/{name}.py'], ov, S3)
              for name in ('ega', 'ega_mope', 'fourier_qk_causal', 'multi_fourier_qk')
              for suffix, ov in (('', []), ('_decay_all', ['--decay_all=True']))],
        refs=[], causal={'multi_fourier_qk': 'fourier_qk_causal', 'multi_fourier_qk_decay_all': 'fourier_qk_causal'},
        pairs=[(f'{name}_decay_all', name) for name in ('ega', 'ega_mope', 'fourier_qk_causal', 'multi_fourier_qk')]),
    # beyond the papers: is it all locality? Primer's learned short filter of q, k, v (dconv) and ALiBi's
    # fixed recency (with and without the learned table) against dot and the forget gate, and the gate
    # composed with each causal locality prior: does the filter add to the gate (ab - a - b + base < 0)?
    'locality': dict(
        runs=[('dot', ['config/dot.py'], [], S3), ('fox', ['config/fox.py'], [], S3),
              ('dconv', ['config/dconv.py'], [], S3),
              ('fox_causal_gauss', ['config/causal_gauss.py'], ['--attn=fox+causal_gauss'], S3),
              ('alibi', ['config/alibi.py'], [], S3),
              ('fox_dconv', ['config/dconv.py'], ['--attn=fox+dconv'], S3),
              ('fox_fourier_qk_causal', ['config/fourier_qk_causal.py'], ['--attn=fox+fourier_qk_causal'], S3),
              ('fox_mope_rel', ['config/fox.py'], ['--pos=mope_rel'], S3),
              ('alibi_learned', ['config/alibi_learned.py'], [], S3),
              ('causal_gauss', ['config/causal_gauss.py'], [], S3),
              ('fourier_qk_causal', ['config/fourier_qk_causal.py'], [], S3),
              ('mope_rel', ['config/mope_rel.py'], [], S3), ('ega', ['config/ega.py'], [], S3),
              ('ega_fox', ['config/ega_fox.py'], [], S3),
              ('dot_nopos', ['config/dot.py'], ['--pos=none'], S3),
              ('fox_nopos', ['config/fox.py'], ['--pos=none'], S3),
              ('rope', ['config/rope.py'], [], S3)],
        refs=['dot', 'fox'], causal={},
        # the runs whose positions allow windows longer than the trained one: lab/longctx.py evaluates their
        # checkpoints at T = 128, 256, 512 (a finished run without its ckpt.pt is trained again for it)
        context=['dot_nopos', 'fox_nopos', 'rope', 'alibi', 'mope_rel', 'fox_mope_rel'],
        interactions=[(f'fox_{b}', 'fox', b, 'dot') for b in ('causal_gauss', 'dconv', 'fourier_qk_causal', 'mope_rel')]
        + [('ega_fox', 'ega', 'fox', 'dot')]),
    # do the gains last? the strongest causal priors trained three times as long (6000 steps, warmup and cosine
    # stretched to match), beside their 2000-step runs: the difference to dot through training at both lengths
    'long': dict(
        runs=[(name + suffix, cf, ov + extra, S3)
              for name, cf, extra in [(n, [f'config/{n}.py'], []) for n in LONG] + [BEST]
              for suffix, ov in (('_long', ['--max_iters=6000', '--warmup_iters=300']), ('', []))],
        refs=['dot_long', 'dot'], causal={}, long={name + '_long': name for name in LONG + (BEST[0],)}),
    # does dot attention learn the recency the priors impose, only later? the long study's variants, ALiBi
    # and dot without positions trained again with the attention statistics logged at every eval (train.py's
    # attention_stats): 2000 steps x 3 seeds and 6000 steps, seed 1337 first; arithmetic as at their commits
    'recency': dict(
        runs=[(name + '_stats' + suffix, cf, ov + extra, seeds)
              for suffix, extra, seeds in (('', [], S3), ('_long', ['--max_iters=6000', '--warmup_iters=300'], (1337,)))
              for name, cf, ov in [(n, [f'config/{n}.py'], []) for n in LONG]
              + [BEST, ('alibi', ['config/alibi.py'], []), ('dot_nopos', ['config/dot.py'], ['--pos=none'])]],
        refs=['dot_stats_long', 'dot_stats'], causal={},
        long={name + '_stats_long': name + '_stats' for name in LONG + (BEST[0], 'alibi', 'dot_nopos')}),
    # the data limit: 6000 steps are 12 passes over TinyShakespeare but under one over the larger public-domain
    # corpus of lab/corpus.py (16.1M characters; python -m lab.corpus, then prepare.py --input=data/corpus_txt
    # --out_dir=data/corpus_char): do the locality priors' gains last where the text does not repeat?
    'corpus': dict(
        runs=[('corpus_' + name, [f'config/{name}.py'],
               ['--data_dir=data/corpus_char', '--max_iters=6000', '--warmup_iters=300'], S3)
              for name in ('dot', 'fox', 'causal_gauss')],
        refs=['corpus_dot'], causal={}),
    # does HEAD still compute what the committed runs computed? Since the fused AdamW (and mope_rel's lag
    # table) the round-off differs from the commits the runs were made at, which replay them exactly
    # (lab/replay.py); a fresh 2000-step run at HEAD of dot and of each family, seed 1337, against the
    # committed run of the same seed: the difference should sit inside the committed seeds' spread
    'agree': dict(
        runs=[run for name in AGREE for run in ((name, [f'config/{name}.py'], [], S3),
                                                ('agree_' + name, [f'config/{name}.py'], [], (1337,)))],
        refs=['dot'], causal={}, pairs=[('agree_' + name, name) for name in AGREE]),
    # the seed's reason why the causal filters fail (claim 6): their reach, K <= T/2 taps. With the published
    # fixed a = 4 the Gaussian envelope ends the kernel near 4a = 16 taps whatever K; the published learned scale
    # (from a = 8) at K = T/2 against the same with K = T, the whole window: does a reach past T/2 help? (Two
    # seeds of K = T: its first run ended bitwise equal to K = T/2, the taps past 64 below float32's reach; two of
    # K = T/2: the third seed's time went to the BPE replays)
    'taps': dict(
        runs=[('causal_morlet' + suffix, ['config/causal_morlet.py'], ['--filter_learned=True', *ov], S2)
              for suffix, ov in (('_learned_k128', ['--filter_taps=128']), ('_learned', []))]
        + [('causal_morlet', ['config/causal_morlet.py'], [], S3), ('dot', ['config/dot.py'], [], S3)],
        refs=['dot', 'causal_morlet'], causal={}),
    # phase against amplitude (seed claim 7), and row 12's reason put to a run: the phase ablation of lab/phase.py on
    # FourierQK's bilateral form, on its causal relative and on dot, which never saw a spectrum (there q and k are
    # re-phased after the model computes them); every mode of lab/phase.py; two seeds (the third's time went to the
    # BPE replays)
    'rephase': dict(
        runs=[('rephase_' + name, [f'config/{name}.py'], [], S2) for name in ('dot', 'fourier_qk_causal', 'fourier_qk')],
        refs=['rephase_dot'], causal={'rephase_fourier_qk': 'rephase_fourier_qk_causal'},
        phase=['rephase_dot', 'rephase_fourier_qk_causal', 'rephase_fourier_qk'],
        phase_modes=('random_shared', 'random', 'amplitude')),
    # MOPE's frequencies under the published rule (w = 5 / s where w s < 5: log w gets no gradient there)
    # against the rule on the envelope (s = 5 / w: the frequencies learn; docs/variants.md §1): do the
    # periods leave character scale (row 5), does MOPE still cost (row 2), does the interaction change (row 4)?
    'mope_learned': dict(
        runs=[(name, [f'config/{name}.py'], [], S3) for name in ('dot', 'ega', 'mope', 'ega_mope', 'mope_learned')]
        + [('ega_mope_learned', ['config/ega_mope.py'], ['--pos=mope_learned'], S3)],
        refs=['dot'], causal={}, pairs=[('mope_learned', 'mope'), ('ega_mope_learned', 'ega_mope')],
        interactions=[('ega_mope', 'ega', 'mope', 'dot'), ('ega_mope_learned', 'ega', 'mope_learned', 'dot')]),
    # the paper scale (6 x 8 x 256, T = 256, 5000 steps, 50 val batches: train.py's defaults, overlay '') on
    # one GPU: PAPER_QUEUE's studies, run by lab/gpu_study.py call by call as results/gpu/PLAN.md orders them
    # (lab/plan.py). 1: the EGA paper's table (the causal forms first: they answer this repository's
    # question), the core at 5 seeds (row 1's equivalence margin, +-0.02, wants them)
    'paper': dict(
        runs=[(name, [f'config/{name}.py'], [], S5 if name != 'ega_mope_paper' else S3)
              for name in ('dot', 'ega', 'mope', 'ega_mope', 'ega_paper', 'ega_mope_paper')],
        refs=['dot'], causal={'ega_paper': 'ega', 'ega_mope_paper': 'ega_mope'},
        interactions=[('ega_mope', 'ega', 'mope', 'dot')], overlay=''),
    # MOPE's frozen frequencies where the paper measured (row 5): without weight decay on log w, log s, and
    # from a wide init (sinusoidal w, s = 4 T): is the collapse to character scale the rule's and the decay's?
    'paper_mope': dict(
        runs=[(name, [f'config/{name}.py'], [], S2) for name in ('dot', 'mope')]
        + [('mope_nodecay', ['config/mope.py'], ['--mope_decay=False'], S2),
           ('mope_sin', ['config/mope.py'], ['--mope_init=sin'], S2)],
        refs=['dot', 'mope'], causal={}, pairs=[('mope_nodecay', 'mope'), ('mope_sin', 'mope')], overlay=''),
    # 2: the rivals, the forget gate and the locality study's best combination
    'paper_rivals': dict(
        runs=[(name, [f'config/{name}.py'], [], S3) for name in ('dot', 'fox', 'ega_fox')] + [(*BEST, S3)],
        refs=['dot'], causal={}, overlay=''),
    # 3: the EGA ablations (the study scale's, with the per-head scales alone, history/scale_init there)
    'paper_ablations': dict(
        runs=[(name, [f'config/{name}.py'], [], S3) for name in
              ('dot', 'ega', 'conv', 'conv_paper', 'scale_init', 'ega_morlet', 'ega_morlet_fixed', 'flux', 'phase',
               'daub')] + [('scale_init_normal', ['config/scale_init.py'], ['--scale_init_rest=normal'], S3)],
        refs=['dot', 'ega'], causal={}, overlay=''),
    # 4: the FourierQK paper's table (its three forms LEAK) and the causal filters: last, since their leak
    # verdicts rest on the exact audit and their causal forms cost 5 to 15 times dot's step on the GPU
    'paper_fourierqk': dict(
        runs=[(name, [f'config/{name}.py'], [], S3) for name in
              ('dot', 'fourier_qk', 'multi_fourier_qk', 'random_qk', 'causal_gauss', 'causal_mexhat',
               'causal_morlet', 'fourier_qk_causal')],
        refs=['dot'], causal={'fourier_qk': 'fourier_qk_causal', 'multi_fourier_qk': 'fourier_qk_causal',
                              'random_qk': 'dot'}, overlay=''),
    # 5: the reviewers' cheap questions on row 1. Scale or regime: without dropout (the study scale has none);
    # dot given EGA's GPU time (its step is about 1.6x dot's alone on the H200: 8000 steps); the 16M-character
    # corpus (study corpus's recipe); four times the window (T = 1024, the same tokens a step)
    'paper_reviews': dict(
        runs=[('ega', ['config/ega.py'], [], S3)]
        + [(f'{name}_drop0', [f'config/{name}.py'], ['--dropout=0.0'], S3) for name in ('dot', 'ega', 'ega_paper')]
        + [('dot_8000', ['config/dot.py'], ['--max_iters=8000'], S3)]
        + [('corpus_' + name, [f'config/{name}.py'], ['--data_dir=data/corpus_char', '--max_iters=6000',
                                                     '--warmup_iters=300'], S3) for name in ('dot', 'ega', 'ega_paper')]
        + [(f'{name}_t1024', [f'config/{name}.py'], ['--block_size=1024', '--batch_size=16'], S3)
           for name in ('dot', 'ega', 'ega_paper')],
        refs=['dot_drop0', 'corpus_dot', 'dot_t1024'],
        causal={'ega_paper_drop0': 'ega_drop0', 'corpus_ega_paper': 'corpus_ega', 'ega_paper_t1024': 'ega_t1024'},
        pairs=[('ega_drop0', 'dot_drop0'), ('ega', 'dot_8000'), ('corpus_ega', 'corpus_dot'),
               ('ega_t1024', 'dot_t1024')], overlay=''),
    # GPT-2 BPE tokens (python prepare.py --tokenizer=gpt2 writes data/shakespeare). A run takes
    # 45 to 55 minutes on 2 cores (the 50,257-way output layer), so the runs that test the claim,
    # dot and the causal spectral filters, come first: a study cut short has answered it first
    'bpe': dict(
        runs=[('bpe_' + name, [f'config/{name}.py'], ['--data_dir=data/shakespeare'], S3)
              for name in ('dot', 'fourier_qk_causal', 'causal_morlet', 'ega')],
        refs=['bpe_dot'], causal={}),
}
PAPER_QUEUE = ('paper', 'paper_mope', 'paper_rivals', 'paper_ablations', 'paper_fourierqk', 'paper_reviews')  # PLAN.md's order
PHASE_MODES = ('random_shared', 'random')   # the authors' main mode (q and k share each bin's phase), their stress test


def phase_modes(study):
    """The modes of lab/phase.py a study's `phase` runs are evaluated in."""
    return STUDIES[study].get('phase_modes', PHASE_MODES)
DEFAULT_OVERLAY = 'config/cpu.py'   # the CPU study scale: runs and tables without a scale tag


class Run(NamedTuple):
    study: str
    name: str
    seed: object
    configs: tuple
    overrides: tuple
    scale: str = ''         # '' at the default overlay; else a tag of the overlay: a run at another scale is another run
    label = property(lambda r: f"{r.name}{'@' + r.scale if r.scale else ''}-s{r.seed}")
    # one pool of runs for every study: a run that two studies share (dot, ega) is trained once
    dir = property(lambda r: os.path.join(paths.RUNS, r.label))


def scale_tag(overlay):
    """'' for the default overlay (the CPU study scale); 'paper' without one; else the overlay's name."""
    if overlay == DEFAULT_OVERLAY:
        return ''
    return os.path.splitext(os.path.basename(overlay))[0] if overlay else 'paper'


def plan(study, seeds=None, overlay=None):
    """The runs of a study, seed by seed: every variant's first seed, then the second..."""
    tag = scale_tag(DEFAULT_OVERLAY if overlay is None else overlay)
    runs = [(i, Run(study, name, s, tuple(cf), tuple(ov), tag))
            for name, cf, ov, own in STUDIES[study]['runs'] for i, s in enumerate(seeds or own)]
    return [r for _, r in sorted(runs, key=lambda x: x[0])]


def results_dir(study, opts):
    """results/<study> for the study as specified (its seeds, the default overlay); another seed set
    or scale writes beside it, never over the committed table."""
    tag = scale_tag(opts['overlay'])
    seeds = 'seeds-' + '-'.join(map(str, opts['seeds'])) if opts['seeds'] else ''
    return os.path.join(paths.RESULTS, '@'.join([study] + [t for t in (tag, seeds) if t]))


@functools.lru_cache(maxsize=None)
def train_defaults():
    """The literal top-level assignments of train.py (its hyperparameters), read without torch."""
    out = {}
    with open(os.path.join(paths.REPO, 'train.py')) as f:
        for node in ast.parse(f.read()).body:
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except (AttributeError, IndexError, ValueError, TypeError, SyntaxError):
                pass            # not a `name = literal`
    return out


def resolve(run, overlay):
    """The config as train.py will see it: its defaults, the config files, then --key=value."""
    return config_of(run.configs + ((overlay,) if overlay else ()), run.overrides)


def config_of(configs, overrides):
    """train.py's config from config files (paths in the repository) and --key=value overrides."""
    ns = dict(train_defaults())
    for path in configs:
        with open(os.path.join(paths.REPO, path)) as f:
            exec(compile(f.read(), path, 'exec'), ns)
    for k, _, v in (o[2:].partition('=') for o in overrides):
        try:
            ns[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            ns[k] = v
    return ns


def max_iters(run, overlay):
    """From run.json (what the run was started with), else from the config."""
    try:
        with open(os.path.join(run.dir, 'run.json')) as f:
            return int(json.load(f)['max_iters'])
    except (OSError, ValueError, KeyError, TypeError):
        return int(resolve(run, overlay)['max_iters'])
