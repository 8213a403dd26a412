"""The registry's promises, checked over the registry rather than on examples: every valid
composition of two and three attention parts (model.ATTN, '+'), each under a positional
encoding taken in turn from model.POS (so that every kind, a table, rotary maps and a logit
bias, meets many compositions), and every registered name alone:

- the declared verdict (GPTConfig.leaks) is the exact audit's, at a short and a long window;
- the fused attention (attend) and FlexAttention (attend_flex) compute the plain formula
  (attend_plain), in float64;
- a checkpoint round trip, the optimizer's state included, resumes bit for bit;
- train.py resumes exactly (N steps straight = N/2 + resume + N/2), and sample.py reads the
  checkpoint, for every registered attention and positional encoding.

A new variant is in every list here by being registered. `python causality.py --sweep=True`
runs the audit part for every encoding and every window (.ci/run does).

On the device the tests are given (SPECTRAL_TEST_DEVICE, tests/conftest.py): the audits and the
float64 comparisons run there, and each composition's bf16 autocast logits through the fused path
are held to the float64 formula (tests/test_precision.py's tolerance). On CUDA, FlexAttention runs
compiled and in bf16 only: there tests/test_precision.py holds it; the round trip is then equal to
1e-6 rather than bit for bit (CUDA's backward kernels sum in no fixed order)."""

import io
import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import causality  # noqa: E402
import model  # noqa: E402
import runtime  # noqa: E402
import sample  # noqa: E402
import train  # noqa: E402
from configurator import load_config  # noqa: E402
from conftest import DEVICE, LOW, ON_CUDA  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from test_precision import LOGITS_TOL  # noqa: E402

pytestmark = [pytest.mark.usefixtures('one_thread'),      # tests/conftest.py
              # flex_attention outside torch.compile warns that it forms the scores: what these tests want
              pytest.mark.filterwarnings('ignore:flex_attention called without torch.compile')]

COMPOSITIONS = causality.compositions()
POS = list(model.POS)
AUDIT_T = (16, 64)


def every_composition():
    """(i, attn) for every composition. The suite runs a third of them (every name is in that third
    or in the tests over names); the rest carry the sweep mark, so that .ci/run's sweep step
    (python -m pytest -m "sweep or slow") runs every one of them."""
    return [pytest.param(i, c, id=c, marks=() if i % 3 == 0 else pytest.mark.sweep)
            for i, c in enumerate(COMPOSITIONS)]


def pos_for(i):
    return POS[i % len(POS)]


def tiny(**kw):
    base = dict(block_size=16, vocab_size=11, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    return GPTConfig(**{**base, **kw})


def test_the_compositions_are_every_valid_pair_and_triple():
    """compositions() is built from the registry: check it against a count made here, and that
    each one is accepted and each pair it leaves out is refused."""
    names = [n for n, v in model.ATTN.items() if n != 'dot' and v.slot != 'mixer' and not v.of]
    slots = [model.ATTN[n].slot for n in names]
    assert len(set(COMPOSITIONS)) == len(COMPOSITIONS) > 600
    pairs = [c for c in COMPOSITIONS if c.count('+') == 1]
    shared = sum(slots.count(s) * (slots.count(s) - 1) // 2 for s in set(slots) if s != 'gate')
    assert len(pairs) == len(names) * (len(names) - 1) // 2 - shared
    for a in names:
        for b in names:
            if a < b and f'{a}+{b}' not in COMPOSITIONS and f'{b}+{a}' not in COMPOSITIONS:
                with pytest.raises(ValueError, match='both fill'):
                    GPTConfig(attn=f'{a}+{b}')


@pytest.mark.parametrize('i,attn', every_composition())
def test_every_composition_audits_as_declared(i, attn):
    cfg = GPTConfig(attn=attn, pos=pos_for(i))
    for T in AUDIT_T:
        au = causality.audit(cfg, T=T, device=DEVICE)
        assert au.causal == (not cfg.leaks), (attn, cfg.pos, T, str(au))


def generation_gap(cfg, T=16):
    """The largest difference, in float64 on the device, between a tiny perturbed copy's logits as it
    generates (causality.generation_logits: position t from the model run on tokens 0..t alone) and its
    windowed logits; on a batch whose first three tokens differ (a causal EGA's tie at key 1 is broken by
    round-off, which differs between the two: perturbed() says why)."""
    g = torch.Generator().manual_seed(0)
    m, T, V = causality.audit_model(cfg, T, g, DEVICE)
    idx = torch.randint(V, (2, T), generator=g)
    idx[:, :3] = torch.stack([torch.randperm(V, generator=g)[:3] for _ in range(2)])
    idx = idx.to(DEVICE)
    return (causality.generation_logits(m, idx) - m(idx)[0]).abs().max().item()


def edges(cfg):
    """The declared reasons (Variant.edge) why a causal model's generated logits are not its windowed ones."""
    return [model.ATTN[n].edge for n in model.components(cfg.attn) if model.ATTN[n].edge] + \
        [model.POS[n].edge for n in model.pos_components(cfg.pos) if model.POS[n].edge]


def generates_as_declared(cfg):
    """A causal model without a declared edge generates its windowed logits (to float64 round-off: the audit's
    strongest check, every position against every prefix); a leaking one, or one with an edge, does not."""
    gap = generation_gap(cfg)
    if cfg.leaks or edges(cfg):
        assert gap > 1e-6, (cfg.attn, cfg.pos, 'declared to differ, but generates its windowed logits', gap)
    else:
        assert gap <= 1e-9, (cfg.attn, cfg.pos, "causal, but its generated logits are not its windowed ones: "
                             "it depends on the window's end (declare Variant.edge, with why) or leaks", gap)


@pytest.mark.parametrize('i,attn', every_composition())
def test_every_composition_generates_its_windowed_logits_unless_declared(i, attn):
    generates_as_declared(GPTConfig(attn=attn, pos=pos_for(i)))


@pytest.mark.parametrize('name', [f'--attn={a}' for a in model.ATTN] + [f'--pos={p}' for p in model.POS] +
                         [f'--attn={a} --{f}={vals[0]}' for a, v in model.ATTN.items() if isinstance(v.leaks, dict)
                          for f, vals in v.leaks.items()])
def test_every_name_generates_its_windowed_logits_unless_declared(name):
    kw = dict(a[2:].split('=') for a in name.split())
    generates_as_declared(GPTConfig(**{'attn': 'dot', 'pos': 'learned', **kw}))


def test_the_forms_that_generate_otherwise_are_named_with_why():
    """Today one causal part depends on the window's end: conv_paper (its factor is smaller near the edges).
    A new one is a decision: its Variant.edge says why, and this list names it."""
    named = {n: v.edge for table in (model.ATTN, model.POS) for n, v in table.items() if v.edge}
    assert set(named) == {'conv_paper'} and all(len(why) > 40 for why in named.values()), named


LEAKY_OPTIONS = [(c, f, vals[0]) for c in COMPOSITIONS for n in c.split('+')
                 if isinstance(model.ATTN[n].leaks, dict) for f, vals in model.ATTN[n].leaks.items()]


@pytest.mark.parametrize('attn,field,value', LEAKY_OPTIONS[::7], ids=[f'{c} {f}={v}' for c, f, v in LEAKY_OPTIONS[::7]])
def test_a_composition_with_a_leaking_option_leaks(attn, field, value):
    """A part's published, leaking form (ega_norm=window) makes every composition with it leak,
    declared and audited (a seventh of them here; the sweep's step runs the default forms)."""
    cfg = GPTConfig(attn=attn, **{field: value})
    assert cfg.leaks and not causality.audit(cfg, T=16, device=DEVICE).causal, (attn, field, value)


def perturbed(attn, pos, seed, **kw):
    """A tiny model with perturbed weights, and a batch whose first three tokens differ: without an
    absolute position, equal tokens there tie exactly in a causal EGA's statistics, and a tie is
    broken by each path's round-off (z at key 1 is the sign of e_1 - e_0; docs/variants.md §2)."""
    torch.manual_seed(seed)
    m = GPT(tiny(attn=attn, pos=pos, **kw)).double().eval().to(DEVICE)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    idx = torch.randint(11, (2, 16))
    idx[:, :3] = torch.stack([torch.randperm(11)[:3] for _ in range(2)])
    return m, idx.to(DEVICE)


@torch.no_grad()
def logits_by_path(attn, pos, seed, impls=('sdpa', 'flex')):
    """The largest difference of each path's logits (the fused SDPA kernel; FlexAttention's forward,
    eager, on the CPU) from attend_plain's, in float64 on the device; and of the fused path's under
    bf16 autocast ('sdpa/bf16'), relative to the largest logit, in a one-layer copy: with two, the
    second layer's causal EGA statistics at key 1 are the sign of e_1 - e_0, which bf16's rounding of
    the first layer's output flips wherever the two are within about 1% (docs/variants.md §2)."""
    m, idx = perturbed(attn, pos, seed)
    plain = m.set_impl('plain')(idx)[0]
    out = {impl: (m.set_impl(impl)(idx)[0] - plain).abs().max().item()
           for impl in impls if impl != 'flex' or not ON_CUDA}
    if not ON_CUDA:     # float32 through the fused path: round-off of the formula, relative
        out['sdpa/float32'] = (m.float().set_impl('sdpa')(idx)[0].double() - plain).abs().max().item() \
            / plain.abs().max().item()
    m, idx = perturbed(attn, pos, seed, n_layer=1)
    plain = m.set_impl('plain')(idx)[0]
    m.float().set_impl('sdpa')
    _, ctx = train.autocast(torch.device(DEVICE).type, LOW)
    with ctx:
        low = m(idx)[0].double()
    out[f'sdpa/{LOW}'] = (low - plain).abs().max().item() / plain.abs().max().item()
    return out


def within(impl, d):
    """bf16 within LOGITS_TOL, float32 within 1e-5 (it once gave EGA's prefix z the sign of round-off
    where two energies tied: 2e-2), float64 within 1e-8 (FoX's logits reach T |log f|)."""
    return d <= {LOW: LOGITS_TOL, 'float32': 1e-5}.get(impl.partition('/')[2], 1e-8)


# eager FlexAttention costs ~75 ms a layer here (its score_mod is vmapped): every composition runs
# it in tests/test_sweep.py (.ci/run's sweep step); the suite takes every form and every 16th one
FLEX_SAMPLE = set(COMPOSITIONS[::16])


@pytest.mark.parametrize('i,attn', every_composition())
def test_every_composition_fused_equals_plain(i, attn):
    impls = ('sdpa', 'flex') if attn in FLEX_SAMPLE else ('sdpa',)
    for impl, d in logits_by_path(attn, pos_for(i), i, impls).items():
        assert within(impl, d), (attn, pos_for(i), impl, d)


@pytest.mark.parametrize('name', [f'--attn={a}' for a in model.ATTN if a != 'fnet'] + [f'--pos={p}' for p in model.POS])
def test_every_name_fused_and_flex_equal_plain(name):
    kind, _, value = name[2:].partition('=')
    for impl, d in logits_by_path(**{'attn': 'dot', 'pos': 'learned', kind: value}, seed=0).items():
        assert within(impl, d), (name, impl, d)


def one_step(m, opt, seed):
    """One AdamW step on a batch drawn from seed, dropout's stream from it too."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(11, (2, 16), generator=g).to(DEVICE)
    torch.manual_seed(seed)
    m.train()(idx, idx)[1].backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def fresh(cfg):
    torch.manual_seed(0)
    m = GPT(cfg).to(DEVICE)
    return m, m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), torch.device(DEVICE).type)


@pytest.mark.parametrize('i,attn', every_composition())
def test_every_composition_round_trips_and_resumes_bit_for_bit(i, attn):
    """Saved after a step as train.py saves (weights, optimizer, the optimizer's parameter
    names), read back into a new model and optimizer: the next step gives the same parameters,
    bit for bit, as the model that never stopped (dropout on). In memory; the file path,
    runtime.load_checkpoint, is train.py's own in the test below."""
    cfg = tiny(attn=attn, pos=pos_for(i), dropout=0.1, n_layer=1)
    m, opt = fresh(cfg)
    one_step(m, opt, 1)
    buf = io.BytesIO()
    torch.save({'model': m.state_dict(), 'optimizer': opt.state_dict(), 'model_args': asdict(cfg),
                'param_names': runtime.optimizer_names(m, opt)}, buf)
    buf.seek(0)
    ck = torch.load(buf, weights_only=True, map_location=DEVICE)
    cfg2 = GPTConfig(**ck['model_args'])
    assert cfg2 == cfg
    m2, opt2 = fresh(cfg2)
    assert runtime.optimizer_fits(ck, m2, opt2)
    m2.load_state_dict(ck['model'])
    opt2.load_state_dict(ck['optimizer'])
    one_step(m, opt, 2)
    one_step(m2, opt2, 2)
    for (n, p), p2 in zip(m.named_parameters(), m2.parameters()):
        assert (torch.allclose(p, p2, rtol=0, atol=1e-6) if ON_CUDA else torch.equal(p, p2)), (attn, n)


# train.py itself, for every registered name: the smallest run that evaluates, saves and resumes
TINY_RUN = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=2',
            '--eval_iters=1', '--eval_interval=2', '--log_interval=1', '--max_iters=4', '--warmup_iters=1',
            '--lr_decay_iters=4', '--learning_rate=1e-3', '--min_lr=1e-4', '--dropout=0.1',
            '--device=cpu', '--compile=False']
NAMES = [f'--attn={a}' for a in model.ATTN] + [f'--pos={p}' for p in model.POS if p != 'learned']


def run_cfg(data_dir, out_dir, *extra):
    return load_config(train.DEFAULTS, TINY_RUN + [f'--data_dir={data_dir}', f'--out_dir={out_dir}', *extra],
                       train.CHOICES)


def losses(out_dir):
    rows = [json.loads(line) for line in (Path(out_dir) / 'log.jsonl').read_text().splitlines()]
    return [(r['iter'], r['loss']) for r in rows if r['kind'] == 'train']


@pytest.mark.parametrize('name', NAMES)
def test_every_name_resumes_exactly_and_samples(name, data_dir, tmp_path, capsys):
    train.train(run_cfg(data_dir, tmp_path / 'straight', name))
    train.train(run_cfg(data_dir, tmp_path / 'split', name, '--max_iters=2'))
    train.train(run_cfg(data_dir, tmp_path / 'split', name, '--init_from=resume'))
    assert losses(tmp_path / 'split') == losses(tmp_path / 'straight')
    assert [it for it, _ in losses(tmp_path / 'split')] == [1, 2, 3, 4]
    out = sample.sample(load_config(sample.DEFAULTS, [f'--out_dir={tmp_path / "split"}', '--num_samples=1',
                                                      '--max_new_tokens=5', '--device=cpu', '--start=ROMEO'],
                                    sample.CHOICES))
    assert len(out) == 1 and out[0].startswith('ROMEO') and len(out[0]) == len('ROMEO') + 5
