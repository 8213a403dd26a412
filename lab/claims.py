"""
The claims ledger's rows as data: each a published claim (or one of ours, marked), what the paper
says (its number, as it states it), the comparisons the row rests on (the first decides the
verdict), the rule that gives the verdict from the numbers (lab/verdicts.py: ROWS), and a note
on what the numbers mean. No number of ours: lab/ledger.py computes them from the runs' logs.
"""

from dataclasses import dataclass

from lab.studies import BEST


@dataclass
class Cmp:
    """A paired comparison over the seeds both sides have: a - b, or with c and d given the
    interaction a - b - c + d. at: also give the difference at these training steps."""
    a: str
    b: str = 'dot'
    c: str = ''
    d: str = ''
    at: tuple = ()


@dataclass
class Claim:
    n: str                  # the row's number
    claim: str              # the paper's claim, summarised
    paper: str              # the paper's number, as it states it
    rule: str               # 'effect' (the paper's effect), 'sign' (a direction), 'null' (no gain),
    #                         'zero' (no effect either way), or a custom row's name (lab/verdicts.py: ROWS)
    cmps: tuple = ()        # the first is the one the verdict rests on
    effect: float = None    # the paper's effect (rule 'effect'), or its sign (rule 'sign')
    note: str = ''          # what the numbers mean; no number of ours
    source: str = ''        # a results file the row reads (rule 'cost'), under results/


CLAIMS = [
    Claim(
        n='1',
        claim='EGA alone improves on dot attention',
        paper='-0.092 (1.3821 vs 1.4742)',
        rule='effect',
        cmps=(Cmp('ega'), Cmp('ega_paper'), Cmp('ega_paper', 'ega')),
        effect=-0.092,
        note="the causal `ega` against dot; the published `ega_paper` (z-statistics over the whole "
             "window) leaks, and its leak, `ega_paper - ega`, is the third comparison"),
    Claim(
        n='2',
        claim='MOPE alone is slightly worse',
        paper='+0.032 (1.5060)',
        rule='effect',
        cmps=(Cmp('mope'),),
        effect=0.032),
    Claim(
        n='3',
        claim='EGA + MOPE is the best model',
        paper='-0.119 (1.3550)',
        rule='effect',
        cmps=(Cmp('ega_mope'), Cmp('ega_mope', 'ega'), Cmp('ega_mope_paper', 'ega_mope')),
        effect=-0.119,
        note='the combination is compared with dot, then with EGA alone; the last comparison is the '
             "leak of the published form"),
    Claim(
        n='4',
        claim='EGA and MOPE are superadditive',
        paper='-0.059 (the combined change minus the sum of the single ones)',
        rule='effect',
        cmps=(Cmp('ega_mope', 'ega', 'mope', 'dot'),),
        effect=-0.059),
    Claim(
        n='5',
        claim="MOPE's learned pairs form four clusters (character, word, clause, sentence)",
        paper='qualitative',
        rule='mope_pairs',
        note="the published init (periods of 2 to 6.3 tokens) and the `w s >= 5` rule "
             'keep every pair at character scale: `results/ega_mope/mope_pairs.png`'),
    Claim(
        n='6a',
        claim='lag (convolution) attention helps: the published code',
        paper='-0.007',
        rule='effect',
        cmps=(Cmp('conv_paper'),),
        effect=-0.007,
        note="`conv_paper` is the published code: dot attention with a fixed logit scale near the "
             "window's edges (its lag shift cancels), so it tests no lag effect"),
    Claim(
        n='6b',
        claim='lag (convolution) attention helps: a causal lag attention',
        paper='-0.007',
        rule='effect',
        cmps=(Cmp('conv'), Cmp('conv', 'ega')),
        effect=-0.007,
        note='`conv` (ours) filters the keys over lags 0..3 with a learned causal kernel: the lag '
             'attention the paper describes; against `ega` for scale'),
    Claim(
        n='7a',
        claim='per-head scale init gives no benefit (slightly worse): the published code',
        paper='+0.007',
        rule='null',
        cmps=(Cmp('scale_init'),),
        note="the published code changes two things: the per-head q, k scales, and PyTorch's default init "
             'of the output projections and the MLP (rows 7b and 7c take them apart)'),
    Claim(
        n='7b',
        claim='per-head scale init gives no benefit (slightly worse): the per-head scales alone',
        paper='+0.007',
        rule='null',
        cmps=(Cmp('history/scale_init'),),
        note='`history/scale_init` (`scale_init_rest=normal`) is the first change alone'),
    Claim(
        n='7c',
        claim="(ours) the published code's gain comes from its second change, PyTorch's default init of the "
              'other matrices',
        paper='-',
        rule='sign',
        cmps=(Cmp('scale_init', 'history/scale_init'),),
        effect=-1),
    Claim(
        n='8',
        claim='spectral flux helps',
        paper='-0.012',
        rule='effect',
        cmps=(Cmp('flux'), Cmp('flux', 'ega_morlet')),
        effect=-0.012,
        note='the second comparison is against its own base, the Morlet gate without the flux logit'),
    Claim(
        n='9',
        claim='phase coherence hurts slightly',
        paper='+0.007',
        rule='effect',
        cmps=(Cmp('phase'), Cmp('phase', 'ega_morlet')),
        effect=0.007),
    Claim(
        n='10',
        claim='structured priors (Daubechies, fixed Morlet) lose to learned projections',
        paper='qualitative',
        rule='sign',
        cmps=(Cmp('daub', 'ega'), Cmp('ega_morlet_fixed', 'ega'), Cmp('ega_morlet', 'ega'),
              Cmp('ega_morlet_fixed', 'ega_morlet')),
        effect=1,
        note='the learned Morlet bank loses to `ega` too: what costs is the filter-bank gate, learned or not'),
    Claim(
        n='11',
        claim='Fourier-QK, MultiFourier-QK and Random-QK reach val 0.608, 0.309 and 1.031',
        paper='val losses '
              'far below any char-level model',
        rule='leak',
        cmps=(Cmp('fourier_qk', 'fourier_qk_causal'), Cmp('multi_fourier_qk', 'fourier_qk_causal'),
              Cmp('random_qk'), Cmp('mexhat_qk', 'causal_mexhat')),
        note='the bilateral FFT over time mixes every position into every other; random bands leak '
             'as much as learned ones, so the low losses need only the future tokens'),
    Claim(
        n='12',
        claim='randomising the phases of q, k at eval is worse than dot',
        paper='qualitative',
        rule='phase',
        cmps=(Cmp('fourier_qk'), Cmp('multi_fourier_qk')),
        note='random phases scramble the time signals q and k that any trained model relies on (row 44b re-phases '
             'dot and a causal model), and these models leak: the test says nothing about phase coherence in '
             'causal attention'),
    *(Claim(n=f'13{x}', claim=f'causal spectral filters do not beat dot at character level: the causal {what}',
            paper='qualitative', rule='null', cmps=(Cmp(v, at=(250, 2000)),), note=note)
      for x, what, v, note in (('a', 'Gaussian', 'causal_gauss', 'a causal smoothing of q and k is a locality prior '
                                '(rows 26 to 30); the gains shrink through training'),
                               ('b', 'Mexican hat', 'causal_mexhat', ''), ('c', 'Morlet', 'causal_morlet', ''))),
    Claim(
        n='13d',
        claim='causal spectral filters do not beat dot at character level: the causal Gaussian at 6000 steps',
        paper='qualitative',
        rule='null',
        cmps=(Cmp('causal_gauss_long', 'dot_long', at=(2000, 4000)),),
        note='the paper trained 5000 steps: `python -m lab.study --study=long` (row 30)'),
    Claim(
        n='14',
        claim='orthogonal and non-orthogonal mixing controls give no gain',
        paper='qualitative',
        rule='leak',
        cmps=(Cmp('qk_orthogonal'), Cmp('qk_gaussian')),
        note='both controls mix every position into every other: they leak, and still do worse than dot. Read as maps '
             'over channels, a rotation R of both q and k changes no logit (R^T R = I: dot exactly), and a fixed map P '
             'only sets the metric P^T P, which the learned q projection absorbs: no test at all; so time mixes'),
    Claim(
        n='15',
        claim='learned periods settle near 49, 27, 10 and 6 tokens',
        paper='qualitative',
        rule='periods',
        note="the published periods are the published init (50, 26, 10, 5); and these models leak"),
    Claim(
        n='16',
        claim='the Morlet irfft cross-correlation leaks (val ~0.018)',
        paper='0.018',
        rule='leaks',
        cmps=(Cmp('morlet_xcorr', 'causal_morlet'),),
        note='the paper reports the leak itself'),
    Claim(
        n='17',
        claim='the shuffled-val gap tells leaks from learning',
        paper='diagnostic',
        rule='gap',
        note='only the exact audit tells every leak from learning'),
    Claim(
        n='18',
        claim='causal spectral attention might work at word scale (GPT-2 BPE)',
        paper='conjecture',
        rule='sign',
        cmps=(Cmp('bpe_fourier_qk_causal', 'bpe_dot', at=(500, 2000)),
              Cmp('bpe_causal_morlet', 'bpe_dot', at=(500, 2000)), Cmp('bpe_ega', 'bpe_dot')),
        effect=-1,
        note='GPT-2 BPE, 302k training tokens (2000 steps are about 14 epochs); the early leads shrink '
             'by the end; a larger corpus is the fuller test, beyond this CPU'),
    Claim(
        n='19',
        claim='(ours, FoX) EGA\'s gain survives next to a forget gate',
        paper='-',
        rule='sign',
        cmps=(Cmp('ega_fox', 'fox'), Cmp('ega_fox_nopos', 'fox_nopos'), Cmp('fox', at=(250, 2000))),
        effect=-1),
    Claim(
        n='20',
        claim='(ours, FoX) EGA and a forget gate add',
        paper='-',
        rule='zero',
        cmps=(Cmp('ega_fox', 'ega', 'fox', 'dot'), Cmp('ega_fox_nopos', 'ega_nopos', 'fox_nopos', 'dot_nopos')),
        note='an interaction above 0 means they overlap: much of what EGA gives, a per-key causal '
             'down-weighting, a forget gate gives already'),
    Claim(
        n='21',
        claim='(ours) the lag-domain Morlet kernel of MOPE\'s theory, as a relative bias '
              '(`--pos=mope_rel`), helps',
        paper='-',
        rule='sign',
        cmps=(Cmp('mope_rel', at=(500, 2000)), Cmp('mope')),
        effect=-1,
        note='a learned per-head lag bias: a locality prior, where the absolute MOPE hurts'),
    Claim(
        n='22a',
        claim='EGA costs nothing: parameters < 0.3%',
        paper='< 0.3% parameters',
        rule='params'),
    *(Claim(n=f'22{x}', claim=f'EGA costs nothing ("no computational cost"): training at {where}', paper='-',
            rule='cost', source=f'bench/{src}.json')
      for x, where, src in (('b', "the paper's size (eager, CPU)", 'authors_paper'),
                            ('c', 'the study scale (eager, CPU)', 'ega_cost'),
                            ('d', 'the study scale (compiled, CPU)', 'cpu_compile'))),
    Claim(
        n='23',
        claim='FourierQK avoids irfft reconstruction: it collapses the frequency dimension to a '
              'position-weighted scalar',
        paper='-',
        rule='untestable',
        note="every FourierQK class in the authors' code reconstructs q and k with irfft; the form "
             'the sentence describes is not in their code, so there is nothing to run'),
    Claim(
        n='24',
        claim="FourierQK's EMD validation: EMD of the trained q, k recovers the learned periods "
              '(about 49, 27, 10, 6) independently',
        paper='-',
        rule='emd',
        note='EMD acts as a dyadic filter bank on any signal; `python -m lab.emd` (optional '
             'EMD-signal package) decomposes q and k of the trained checkpoints, of the same '
             'architecture untrained, and white noise, on the same val windows: results/fourierqk/emd.json'),
    *(Claim(n=f'25{x}', claim=f"(ours) the authors' weight-decay recipe (AdamW on every parameter) changes nothing "
            f"for `{v}`", paper='-', rule='zero', cmps=(Cmp(f'{v}_decay_all', v),))
      for x, v in zip('abcd', ('ega', 'ega_mope', 'fourier_qk_causal', 'multi_fourier_qk'))),
    Claim(
        n='26',
        claim="(ours, locality) Primer's learned short filter of q, k, v (`dconv`, 3 taps) does what the "
              'fixed causal Gaussian filter of q and k (`causal_gauss`, 64 taps) does',
        paper='-',
        rule='zero',
        cmps=(Cmp('dconv', 'causal_gauss'), Cmp('dconv'), Cmp('causal_gauss')),
        note='`python -m lab.study --study=locality`: the learned counterpart of the fixed filters; an interval '
             'holding 0 says the spectral shape of the fixed filter adds nothing to short-range mixing'),
    Claim(
        n='27',
        claim='(ours, locality) a fixed recency bias (ALiBi) gives what the learned forget gate gives',
        paper='-',
        rule='zero',
        cmps=(Cmp('alibi', 'fox'), Cmp('alibi_learned', 'fox'), Cmp('alibi'), Cmp('alibi_learned')),
        note='`alibi` drops the learned absolute positions; `alibi_learned` (`--pos=learned+alibi`) keeps them'),
    Claim(
        n='28',
        claim='(ours, locality) nothing beats the forget gate: no other locality prior, alone or added to '
              'the gate, by more than the seed spread',
        paper='-',
        rule='all',
        cmps=tuple(Cmp(v, 'fox') for v in ('ega_fox', 'fox_causal_gauss', 'fox_fourier_qk_causal', 'fox_mope_rel',
                                           'fox_dconv', 'causal_gauss', 'mope_rel', 'dconv', 'fourier_qk_causal',
                                           'alibi', 'alibi_learned', 'conv')),
        note='each against `fox`, sorted by the mean; a claim that nothing gains turns on every comparison '
             "(the header's rule 'all')"),
    *(Claim(n=f'29{x}', claim=f'(ours, locality) `{v}` adds to the forget gate (the combination beats the sum of '
            'its parts)', paper='-', rule='sign', cmps=(Cmp(f'fox_{v}', 'fox', v, 'dot'),), effect=-1,
            note='' if x != 'a' else 'interactions `ab - a - b + dot`: below 0 the two add more than their sum, '
                                     'above 0 they overlap; EGA with the gate is row 20')
      for x, v in zip('abcd', ('causal_gauss', 'fourier_qk_causal', 'mope_rel', 'dconv'))),
    Claim(
        n='30',
        claim='(ours, locality) the locality gains last: three times the training (6000 steps) keeps them',
        paper='-',
        rule='sign',
        cmps=tuple(Cmp(f'{v}_long', 'dot_long', at=(2000, 4000)) for v in
                   ('fox', 'causal_gauss', 'fourier_qk_causal', BEST[0])),
        effect=-1,
        note='`python -m lab.study --study=long`: warmup and cosine stretched to 6000 steps; results/long/long.png '
             'sets the difference to dot through training beside the 2000-step runs'),
    Claim(
        n='31',
        claim="(ours, FoX's headline) the locality priors hold past their training length: the loss on "
              'positions 128 to 511 is no higher than on 64 to 127',
        paper='-',
        rule='context',
        note='`python -m lab.longctx`: the checkpoints trained at T = 128 on val windows of 512, per seed the '
             'mean loss past 128 minus the mean on 64 to 127 (the first 64 positions see little context); learned '
             'absolute positions cannot run past their table, and a variant whose parts read the window length is refused'),
    Claim(
        n='32',
        claim='(ours, recency) dot attention learns the recency profile the locality priors impose, only later',
        paper='-',
        rule='recency_profile',
        note='`python -m lab.recency` on study recency (train.py logs each layer and head\'s attention statistics '
             'at every eval): the mean attention distance E[i - j] of dot against each prior\'s at the end of '
             'training; results/recency/recency.png and lag_heat.png show them through training'),
    Claim(
        n='33',
        claim="(ours, recency) the priors' advantage is sample efficiency: they reach dot's final loss sooner "
              'and end where dot ends',
        paper='-',
        rule='efficiency',
        note='study long\'s 6000-step runs, per seed: the first eval at which the prior reaches dot\'s final val '
             '(the ratio of steps), and the final difference; results/recency/efficiency.png'),
    Claim(
        n='34',
        claim='(ours, recency) on a corpus that does not repeat, the locality gains last',
        paper='-',
        rule='corpus',
        note='study corpus: 6000 steps on the 16.1M-character corpus of lab/corpus.py, under one pass, against '
             'about 12 passes over TinyShakespeare'),
    Claim(
        n='35',
        claim="(ours, the moonshot) a causal variant reaches dot's 6000-step loss in at most half the steps, on "
              'every seed, and is still ahead at 6000',
        paper='-',
        rule='moonshot',
        note='over the long study\'s priors (fox, causal_gauss, fourier_qk_causal, fox_mope_rel); the attention '
             'statistics say what a closer one would need: results/recency/RECENCY.md'),
]
