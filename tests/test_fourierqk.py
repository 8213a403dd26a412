"""The FourierQK family (docs/variants.md §4): every variant against a plain float64
reference written out here (explicit DFT sums, explicit T x T scores), the shared
FFT convolution against the direct causal sum, a kernel longer than the window
caught leaking, learned bands as periods, gradients and weight decay, compiled vs
eager, and a short training run in which a leaking variant's shuffled-val gap
collapses while a causal one's does not. Tiny models, CPU."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import causality  # noqa: E402
from lab import phase  # noqa: E402
import model  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

D = torch.float64


pytestmark = pytest.mark.usefixtures('one_thread')   # tests/conftest.py


def tiny(**kw):
    base = dict(block_size=16, vocab_size=11, n_layer=1, n_head=2, n_embd=16, dropout=0.0)
    base.update(kw)
    return GPTConfig(**base)


def layer(attn, seed=0, **kw):
    """A float64 attention layer of `attn` whose learned band/scale parameters are moved
    off their init, so a reference that reads the wrong one cannot agree by chance."""
    torch.manual_seed(seed)
    m = GPT(tiny(attn=attn, **kw)).double().eval()
    att = m.transformer.h[0].attn
    with torch.no_grad():
        for name, p in att.named_parameters():
            if name.startswith('qk.'):
                p.add_(0.2 * torch.randn_like(p))
    return att


def qkv(att, x):
    B, T, C = x.shape
    nh = att.nh
    q, k, v = att.c_attn(x).split(C, dim=2)
    return [u.view(B, T, nh, C // nh).transpose(1, 2) for u in (q, k, v)]   # (B, nh, T, hs) each


def ref_attention(att, qf, kf, v, scale):
    """Explicit T x T scores, causal mask, softmax, values; then the output projection."""
    B, nh, T, hs = v.shape
    S = (qf @ kf.transpose(-1, -2)) * scale                    # (B, nh, T, T)
    S = S.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))
    y = (S.softmax(-1) @ v).transpose(1, 2).reshape(B, T, nh * hs)
    return att.c_proj(y)


def dft_filter(w, T):
    """The real (T, T) matrix of irfft(rfft(u) * w, n=T) along time, written as the DFT
    sum: (1/T) sum_f c_f w_f cos(2 pi f (t - s) / T), c_f = 2 except at bin 0 and,
    for even T, the last bin. w: (F,) real weights."""
    F_ = T // 2 + 1
    f = torch.arange(F_, dtype=D)
    c = torch.full((F_,), 2.0, dtype=D)
    c[0] = 1.0
    if T % 2 == 0:
        c[-1] = 1.0
    t = torch.arange(T, dtype=D)
    lag = t[:, None] - t[None, :]                               # (T, T)
    return (c * w * torch.cos(2 * math.pi * f * lag[..., None] / T)).sum(-1) / T


def bins(T, Tb):
    return torch.arange(T // 2 + 1, dtype=D) * Tb / T         # in bins of the model's window


def per_head(mats, u):
    """mats: nh (T, T) matrices, u: (B, nh, T, hs) -> each head's u mixed over time by its matrix."""
    return torch.stack([mats[h] @ u[:, h] for h in range(u.shape[1])], dim=1)


def x_in(T, C=16, B=2, seed=1):
    return torch.randn(B, T, C, dtype=D, generator=torch.Generator().manual_seed(seed))

# ----------------------------------------------------------------------------- bilateral forms


def band_weights(att, T):
    """The reference weights of each bilateral form, from the formulas of docs/variants.md §4."""
    sp, Tb = att.qk, att.qk.Tb
    f = bins(T, Tb)
    if isinstance(sp, (model.FourierBand, model.MultiFourierBands)):
        fs = sp.log_f.detach().exp()                            # (nh,) or (nh, 4)
        w = torch.exp(-(f - fs[..., None]) ** 2 / (2 * sp.s_f ** 2))
        return w / (w.norm(dim=-1, keepdim=True) if sp.norm == 'l2' else w.sum(-1, keepdim=True))
    if isinstance(sp, model.RandomBand):
        w = torch.exp(-(f - sp.centre.double()[:, None]) ** 2 / (2 * sp.width.double()[:, None] ** 2))
        return w / w.norm(dim=-1, keepdim=True)
    if isinstance(sp, model.MexHatBands):
        s = sp.log_s.detach().exp()                             # (nh, 4)
        z = s[..., None] * 2 * math.pi * f / Tb                 # (nh, 4, F)
        w = z ** 2 * torch.exp(-z ** 2 / 2)
        return w / w.sum(-1, keepdim=True)                      # (nh, 4, F): the scales' logits are averaged
    if isinstance(sp, model.DCGaussBand):                               # exp(-f^2 / 2 s_f^2), unit L2 norm, every head
        w = torch.exp(-f ** 2 / (2 * sp.s_f ** 2)).expand(sp.nh, -1)
        return w / w.norm(dim=-1, keepdim=True)
    w = torch.zeros(sp.nh, f.numel(), dtype=D)
    w[:, -1 if isinstance(sp, model.NyquistBin) else 0] = 1.0
    return w


@pytest.mark.parametrize('attn,kw,T', [
    ('fourier_qk', {}, 16), ('fourier_qk', {}, 11), ('fourier_qk', {'fourier_norm': 'sum'}, 16),
    ('fourier_qk', {'fourier_sf': 0.5}, 16), ('multi_fourier_qk', {}, 16),
    ('multi_fourier_qk', {'fourier_norm': 'sum'}, 13), ('random_qk', {}, 16), ('mexhat_qk', {}, 16),
    ('dc_qk', {}, 16), ('dc_gauss_qk', {}, 16), ('dc_gauss_qk', {}, 9), ('nyquist_qk', {}, 16)])
def test_bilateral_forms_match_the_explicit_dft(attn, kw, T):
    att = layer(attn, **kw)
    x = x_in(T)
    q, k, v = qkv(att, x)
    hs = q.shape[-1]
    w = band_weights(att, T)
    if w.dim() == 2:                                            # one filter per head
        H = [dft_filter(w[h], T) for h in range(att.nh)]
        want = ref_attention(att, per_head(H, q), per_head(H, k), v, 1 / math.sqrt(hs))
    else:                                                       # K bands: per-band scores, averaged
        K = w.shape[1]
        S = 0
        for b in range(K):
            H = [dft_filter(w[h, b], T) for h in range(att.nh)]
            S = S + per_head(H, q) @ per_head(H, k).transpose(-1, -2) / math.sqrt(hs) / K
        S = S.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))
        want = att.c_proj((S.softmax(-1) @ v).transpose(1, 2).reshape(x.shape))
    with torch.no_grad():
        got = att(x)
    assert (got - want).abs().max().item() < 1e-6


def test_spectral_filter_bands_side_by_side():
    u = torch.randn(2, 3, 10, 4, dtype=D)
    w = torch.rand(3, 2, 6, dtype=D)
    y = model.spectral_filter(u, w)                             # (2, 3, 10, 8)
    for b in range(2):
        assert torch.allclose(y[..., 4 * b:4 * b + 4], model.spectral_filter(u, w[:, b]), atol=1e-12)


def test_morlet_xcorr_matches_the_circular_lag_sum():
    att = layer('morlet_xcorr')
    T = 16
    x = x_in(T)
    q, k, v = qkv(att, x)
    sp = att.qk
    t = torch.arange(T, dtype=D)
    tau = torch.where(t <= T // 2, t, t - T)
    mats = []
    for h in range(att.nh):
        w, s = sp.log_w[h].detach().exp(), sp.log_s[h].detach().exp()
        kap = torch.exp(-tau ** 2 / (2 * s ** 2)) * torch.cos(w * tau)
        kap = kap / kap.norm()
        # k~_t = sum_s kappa((t - s) mod T) k_s: the keys of every later position come in
        mats.append(kap[(t[:, None] - t[None, :]).long() % T])
    want = ref_attention(att, q, per_head(mats, k), v, 1 / math.sqrt(q.shape[-1]))
    with torch.no_grad():
        assert (att(x) - want).abs().max().item() < 1e-6


@pytest.mark.parametrize('attn', ['qk_orthogonal', 'qk_gaussian'])
def test_mixing_controls(attn):
    att = layer(attn)
    T = 16
    M = att.qk.mix.double()
    assert M.shape == (16, 16)                                  # the family's only T x T tensor
    if attn == 'qk_orthogonal':
        assert torch.allclose(M @ M.T, torch.eye(16, dtype=D), atol=1e-5)
    assert 'qk.mix' in att.state_dict()                   # a checkpoint keeps the draw
    x = x_in(T)
    q, k, v = qkv(att, x)
    want = ref_attention(att, per_head([M] * att.nh, q), per_head([M] * att.nh, k), v, 1 / math.sqrt(q.shape[-1]))
    with torch.no_grad():
        assert (att(x) - want).abs().max().item() < 1e-6


def test_fnet_is_the_two_dimensional_dft():
    att = layer('fnet')
    assert not hasattr(att, 'c_attn')
    T, C = 16, 16
    x = x_in(T)
    tt, cc = torch.arange(T, dtype=D), torch.arange(C, dtype=D)
    Wt = torch.exp(-2j * math.pi * tt[:, None] * tt[None, :] / T) / math.sqrt(T)
    Wc = torch.exp(-2j * math.pi * cc[:, None] * cc[None, :] / C) / math.sqrt(C)
    want = att.c_proj((Wt @ x.to(torch.complex128) @ Wc).real)
    with torch.no_grad():
        assert (att(x) - want).abs().max().item() < 1e-9

# ----------------------------------------------------------------------------- causal forms


def conv_matrix(h, T):
    """Lower-triangular (T, T) Toeplitz matrix of a causal filter: [t, s] = h[t - s] for 0 <= t - s < L."""
    L = h.shape[-1]
    lag = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    ok = (lag >= 0) & (lag < L)
    return torch.where(ok, h[lag.clamp(0, L - 1)], torch.zeros((), dtype=h.dtype))


@pytest.mark.parametrize('L', [1, 5, 24, 25])
def test_fft_causal_conv_is_the_direct_causal_sum(L):
    T = 24
    g = torch.Generator().manual_seed(0)
    u = torch.randn(2, 3, T, 4, dtype=D, generator=g)
    h = torch.randn(3, L, dtype=D, generator=g)
    direct = torch.zeros_like(u)
    for t in range(T):
        for l in range(min(L, t + 1)):
            direct[:, :, t] += h[None, :, l, None] * u[:, :, t - l]
    assert (model.fft_causal_conv(u, h) - direct).abs().max().item() < 1e-9
    # and the same as the shared direct convolution (time last there)
    hs = u.shape[-1]
    y = model.causal_conv(u.transpose(2, 3).reshape(2, 3 * hs, T), h.repeat_interleave(hs, 0))
    assert (y.view(2, 3, hs, T).transpose(2, 3) - direct).abs().max().item() < 1e-9


def test_fft_conv_with_a_kernel_longer_than_the_window_wraps():
    T = 8
    u = torch.zeros(1, 1, T, 1, dtype=D)
    u[..., T - 1, 0] = 1.0                                      # only the last position is non-zero
    h = torch.ones(1, 2 * T, dtype=D)
    y = model.fft_causal_conv(u, h)                             # taps > T reach u[t - l + 2T]
    assert y[0, 0, 0, 0].abs().item() > 0.5                     # position 0 sees position T - 1


def causal_band(att, L):
    sp, Tb = att.qk, att.qk.Tb
    t = torch.arange(max(L, Tb), dtype=D)
    s_t = Tb / (2 * math.pi * sp.s_f)
    h = torch.exp(-t ** 2 / (2 * s_t ** 2)) * torch.cos(2 * math.pi * sp.log_f.detach().exp()[:, None] * t / Tb)
    return (h / h[:, :Tb].norm(dim=-1, keepdim=True))[:, :L]


@pytest.mark.parametrize('T', [16, 9])
def test_fourier_qk_causal_matches_the_explicit_convolution(T):
    att = layer('fourier_qk_causal')
    x = x_in(T)
    q, k, v = qkv(att, x)
    h = causal_band(att, T)
    H = [conv_matrix(h[i], T) for i in range(att.nh)]
    want = ref_attention(att, per_head(H, q), per_head(H, k), v, 1 / math.sqrt(q.shape[-1]))
    with torch.no_grad():
        assert (att(x) - want).abs().max().item() < 1e-9


def test_a_band_kernel_longer_than_the_window_is_caught_leaking():
    # a wide envelope (s_f = 0.25 bins: s_t = 15 tokens) so the taps beyond T matter
    torch.manual_seed(0)
    m = GPT(tiny(attn='fourier_qk_causal', n_layer=2, fourier_sf=0.25)).double()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    assert causality.audit(m).causal                                # taps 0..T-1: exact
    for block in m.transformer.h:
        block.attn.qk.taps = 2 * m.config.block_size     # 2T taps with the FFT of size 2T
    au = causality.audit(m)
    assert not au.causal and au.max_change > 1e-6, str(au)


def filter_kernel(kind, a, K):
    t = torch.arange(K, dtype=D)
    r = t / a
    env = torch.exp(-r ** 2 / 2)
    h = {'causal_gauss': env, 'causal_mexhat': (1 - r ** 2) * env,
         'causal_morlet': env * torch.exp(1j * 6 * r)}[kind]
    return h / h.abs().pow(2).sum().sqrt()


@pytest.mark.parametrize('kind', ['causal_gauss', 'causal_mexhat', 'causal_morlet'])
@pytest.mark.parametrize('learned', [False, True])
def test_causal_filters_match_the_explicit_convolution(kind, learned):
    att = layer(kind, filter_learned=learned, filter_taps=5)
    sp = att.qk
    assert sp.taps == 5
    T = 16
    x = x_in(T)
    q, k, v = qkv(att, x)
    a = sp.log_a.detach().exp() if learned else torch.full((att.nh,), 4.0, dtype=D)
    H = [conv_matrix(filter_kernel(kind, a[h], 5), T) for h in range(att.nh)]
    cq, ck = per_head(H, q.to(H[0].dtype)), per_head(H, k.to(H[0].dtype))
    if kind == 'causal_morlet':
        # (Re q~ . Re k~ + Im q~ . Im k~) / sqrt(hs)
        S = (cq.real @ ck.real.transpose(-1, -2) + cq.imag @ ck.imag.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        S = S.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))
        want = att.c_proj((S.softmax(-1) @ v).transpose(1, 2).reshape(x.shape))
    else:
        want = ref_attention(att, cq, ck, v, 1 / math.sqrt(q.shape[-1]))
    with torch.no_grad():
        assert (att(x) - want).abs().max().item() < 1e-9


def test_filter_taps_default_is_half_the_window_and_shrinks_in_the_audit():
    assert GPT(tiny(attn='causal_gauss')).transformer.h[0].attn.qk.taps == 8
    assert causality.tiny_config(GPTConfig(attn='causal_gauss', filter_taps=128)).filter_taps == 12
    with pytest.raises(ValueError, match='longer than the window'):
        GPTConfig(attn='causal_gauss', filter_taps=300)
    with pytest.raises(ValueError):
        GPTConfig(filter_taps=-1)
    with pytest.raises(ValueError):
        GPTConfig(fourier_sf=0.0)
    with pytest.raises(ValueError):
        GPTConfig(fourier_norm='l1')
    with pytest.raises(ValueError, match='no attention logits'):
        GPTConfig(attn='fnet', pos='rope')

# ----------------------------------------------------------------------------- bands, gradients, decay


def bands(m):
    return causality.learned(m).get('bands', {})


def test_learned_bands_as_periods():
    assert set(bands(GPT(tiny(attn='fourier_qk', block_size=128))).values()) == {32.0}   # bin 4 at T = 128
    assert set(bands(GPT(tiny(attn='fourier_qk_causal', block_size=256))).values()) == {64.0}
    multi = bands(GPT(tiny(attn='multi_fourier_qk', block_size=128, n_layer=2)))
    assert list(multi) == ['0.0', '0.1', '1.0', '1.1']
    assert all(v == pytest.approx([50, 26, 10, 5]) for v in multi.values())
    assert all(v == pytest.approx([50, 26, 10, 5]) for v in bands(GPT(tiny(attn='mexhat_qk'))).values())
    assert bands(GPT(tiny())) == {} and bands(GPT(tiny(attn='causal_morlet'))) == {}


LEARNED = {'fourier_qk': ['log_f'], 'multi_fourier_qk': ['log_f'], 'fourier_qk_causal': ['log_f'],
           'mexhat_qk': ['log_s'], 'morlet_xcorr': ['log_w', 'log_s'], 'causal_morlet': ['log_a']}


@pytest.mark.parametrize('attn', list(LEARNED))
def test_learned_frequencies_get_gradients_and_no_weight_decay(attn):
    torch.manual_seed(0)
    m = GPT(tiny(attn=attn, filter_learned=True))
    idx = torch.randint(11, (2, 16))
    m(idx, idx)[1].backward()
    decayed = {id(p) for p in m.decay_params()}
    for name in LEARNED[attn]:
        p = getattr(m.transformer.h[0].attn.qk, name)
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert id(p) not in decayed, name


def test_random_qk_is_fixed_and_kept_in_the_checkpoint():
    m = GPT(tiny(attn='random_qk'))
    sp = m.transformer.h[0].attn.qk
    assert not any(n.startswith('transformer.h.0.attn.qk') for n, _ in m.named_parameters())
    sd = m.state_dict()
    assert 'transformer.h.0.attn.qk.centre' in sd and 'transformer.h.0.attn.qk.width' in sd
    assert ((0 <= sp.centre) & (sp.centre <= 8)).all() and ((0.5 <= sp.width) & (sp.width <= 16)).all()

# ----------------------------------------------------------------------------- compile, training


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:Torchinductor does not support code generation for complex')
def test_compiled_matches_eager():
    # the spectral filter and its attention call, compiled by the CPU inductor (the FFTs
    # fall back to ATen kernels inside the graph), against eager
    for attn in ('fourier_qk', 'fourier_qk_causal'):
        torch.manual_seed(0)
        att = GPT(tiny(attn=attn)).transformer.h[0].attn.eval()
        x = torch.randn(2, 16, 16)
        with torch.no_grad():
            eager = att(x)
            compiled = torch.compile(att)(x)
        assert torch.allclose(compiled, eager, atol=1e-5, rtol=1e-5), attn


@pytest.mark.parametrize('attn', ['fourier_qk', 'multi_fourier_qk', 'fourier_qk_causal', 'causal_morlet',
                                  'qk_gaussian', 'fnet'])
def test_bf16_autocast_filters_in_float32(attn):
    # under autocast the filters run in float32 (16-bit FFTs are not even available on the CPU)
    torch.manual_seed(0)
    m = GPT(tiny(attn=attn)).eval()
    idx = torch.randint(11, (2, 16))
    with torch.no_grad():
        ref = m(idx)[0]
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = m(idx)[0]
    assert (low.float() - ref).abs().max().item() < 0.05


@pytest.mark.slow
def test_training_a_leak_collapses_the_shuffled_gap(data_dir, tmp_path, capsys):
    import train
    from configurator import load_config
    gaps = {}
    for attn in ('fnet', 'fourier_qk_causal'):
        args = ['--n_layer=2', '--n_head=2', '--n_embd=64', '--block_size=32', '--batch_size=16',
                '--eval_iters=4', '--eval_interval=300', '--log_interval=1000', '--max_iters=300',
                '--warmup_iters=10', '--learning_rate=1e-2', '--min_lr=1e-3', '--dropout=0.0',
                '--device=cpu', '--compile=False', f'--data_dir={data_dir}', f'--out_dir={tmp_path / attn}',
                f'--attn={attn}']
        summary = train.train(load_config(train.DEFAULTS, args, train.CHOICES))
        gaps[attn] = summary['last_eval']['gap']
        rows = [json.loads(l) for l in (tmp_path / attn / 'log.jsonl').read_text().splitlines()]
        evals = [r for r in rows if r['kind'] == 'eval']
        if attn == 'fourier_qk_causal':                        # the learned periods, at every eval
            assert all(len(r['bands']) == 4 for r in evals)
            assert evals[0]['bands']['0.0'] == 8.0              # bin 4 of a 32-token window
        else:
            assert all('bands' not in r for r in evals)
    out = capsys.readouterr().out
    assert '| periods 0.0=8.0 0.1=8.0 1.0=8.0 1.1=8.0' in out
    # the leak reads the next character: shuffled text is predicted as well as real text
    assert gaps['fnet'] < 0.5 < 1.0 < gaps['fourier_qk_causal'], gaps

# ----------------------------------------------------------------------------- the phase ablation


def test_rephase_then_filter_is_the_filter_of_the_rephased_spectrum():
    """The ablation re-phases a bilateral form at its filter's input: the filter then weights the re-
    phased spectrum, |U| e^(i phi) w (the authors' operation), or |U| w, to round-off in float64."""
    g = torch.Generator().manual_seed(0)
    for T in (12, 11):
        u = torch.randn(2, 2, T, 3, dtype=D, generator=g)
        w = torch.rand(2, T // 2 + 1, dtype=D, generator=g)
        U = torch.fft.rfft(u, dim=-2)
        amp = torch.fft.irfft(U.abs().to(U.dtype) * w[:, :, None], n=T, dim=-2)
        assert torch.allclose(model.spectral_filter(phase.rephase(u, 'amplitude'), w), amp, atol=1e-12)
        torch.manual_seed(0)
        phi = phase.phase_angles(2, 2, T, 3, 'cpu', D)
        y = model.spectral_filter(phase.rephase(u, phi), w)
        want = torch.fft.irfft(U.abs() * torch.exp(1j * phi) * w[:, :, None], n=T, dim=-2)   # |U| e^(i phi) w
        assert torch.allclose(y, want, atol=1e-12)
        assert not torch.allclose(y, model.spectral_filter(u, w), atol=1e-3)         # the phases did move


@pytest.mark.parametrize('T', [12, 11])
def test_phase_angles(T):
    torch.manual_seed(0)
    phi = phase.phase_angles(3, 2, T, 4, 'cpu', D)
    assert phi.shape == (3, 2, T // 2 + 1, 4)
    assert torch.all(phi[:, :, 0] == 0) and (T % 2 == 1 or torch.all(phi[:, :, -1] == 0))
    inner = phi[:, :, 1:-1] if T % 2 == 0 else phi[:, :, 1:]
    assert inner.min() >= 0 and inner.max() < 2 * math.pi and inner.std() > 1.0


def filtered_phases(mode):
    """The phases of rfft(q~) and rfft(k~) of a fourier_qk layer under a phase mode: (B, nh, F, hs) each."""
    att = layer('fourier_qk')
    if mode != 'none':
        att.qk = phase.Rephase(att.qk, phase.hook(mode), att.qk.phased)
    q, k, _ = qkv(att, x_in(16))
    torch.manual_seed(0)
    qf, kf, _ = att.qk(q, k)
    return [torch.fft.rfft(z, dim=-2).angle() for z in (qf, kf)]


def test_random_shared_gives_q_and_k_one_phase_per_bin():
    pq, pk = filtered_phases('random_shared')
    inner = slice(1, -1)                                        # bin 0 and Nyquist: phase 0 (or pi: the sign)
    assert torch.allclose(pq[:, :, inner], pk[:, :, inner], atol=1e-9)          # the same for q and k
    assert torch.allclose(pq[:, :, inner], pq[:, :, inner, :1].expand_as(pq[:, :, inner]), atol=1e-9)  # channels
    rq, rk = filtered_phases('random')                          # independent: q, k and channels differ
    assert (rq[:, :, inner] - rk[:, :, inner]).abs().max() > 1.0
    assert (rq[:, :, inner] - rq[:, :, inner, :1]).abs().max() > 1.0
    nq, nk = filtered_phases('none')
    assert not torch.allclose(nq[:, :, inner], pq[:, :, inner], atol=1e-3)


@pytest.mark.parametrize('attn', ['fourier_qk', 'morlet_xcorr'])
def test_set_qk_phase(attn):
    torch.manual_seed(0)
    m = GPT(tiny(attn=attn)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
        idx = torch.randint(11, (2, 16))
        base = m(idx)[0]
        for mode in ('random_shared', 'random', 'amplitude'):
            assert phase.set_phase(m, mode) == 'filter'
            assert (m(idx)[0] - base).abs().max() > 1e-2, mode
            q, k = torch.randn(2, 2, 16, 4), torch.randn(2, 2, 16, 4)   # morlet_xcorr filters k alone: q stays
            assert torch.equal(m.transformer.h[0].attn.qk(q, k)[0], q) == (attn == 'morlet_xcorr'), mode
        phase.set_phase(m, 'none')
        assert torch.equal(m(idx)[0], base)
    assert phase.set_phase(GPT(tiny(attn='fnet', pos='learned')), 'random') is None     # no q and k to re-phase


@pytest.mark.parametrize('attn', ['dot', 'fourier_qk_causal', 'causal_morlet', 'ega+fox'])
def test_rephase_after_qk_is_the_plain_formula_and_undoes(attn):
    """A model without a bilateral form is re-phased after its qk part: each of q~, k~ becomes
    irfft(|rfft(q~)| e^(i phi)) (float64, against the formula), or irfft(|rfft(q~)|); 'none' restores it."""
    torch.manual_seed(0)
    m = GPT(tiny(attn=attn)).double().eval()
    idx = torch.randint(11, (2, 16))
    with torch.no_grad():
        for p in m.parameters():                                    # away from the near-uniform init
            p.add_(0.3 * torch.randn_like(p))
        base = m(idx)[0]
        assert phase.set_phase(m, 'random_shared') == 'qk'
        att = m.transformer.h[0].attn
        assert isinstance(att.qk, phase.Rephase)
        q, k = torch.randn(2, 2, 16, 4, dtype=D), torch.randn(2, 2, 16, 4, dtype=D)
        inner = att.qk.inner(q, k) if att.qk.inner is not None else (q, k, None)
        torch.manual_seed(1)
        qf, kf, scale = att.qk(q, k)
        torch.manual_seed(1)
        phi = phase.phase_angles(2, 2, 16, 1, 'cpu', D)             # the hook's draw: one per bin, shared
        for z, want in ((qf, inner[0]), (kf, inner[1])):
            Z = torch.fft.rfft(want, dim=-2)
            assert torch.allclose(z, torch.fft.irfft(Z.abs() * torch.exp(1j * phi), n=16, dim=-2), atol=1e-12)
        assert scale == inner[2]
        assert (m(idx)[0] - base).abs().max() > 1e-3
        phase.set_phase(m, 'amplitude')
        assert not isinstance(att.qk.inner, phase.Rephase)          # one wrapper, not one per call
        qf = att.qk(q, k)[0]
        assert torch.allclose(qf, torch.fft.irfft(torch.fft.rfft(inner[0], dim=-2).abs().to(torch.cdouble), n=16,
                                                  dim=-2), atol=1e-12)
        phase.set_phase(m, 'none')
        assert torch.equal(m(idx)[0], base)


def test_phase_ablation_at_eval(data_dir, tmp_path, capsys):
    import train
    from configurator import load_config
    args = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=4',
            '--eval_iters=2', '--eval_interval=20', '--log_interval=1000', '--max_iters=20',
            '--warmup_iters=2', '--learning_rate=1e-2', '--dropout=0.0', '--device=cpu', '--compile=False',
            f'--data_dir={data_dir}', f'--out_dir={tmp_path}', '--attn=fourier_qk']
    normal = train.train(load_config(train.DEFAULTS, args, train.CHOICES))['last_eval']
    for mode in ('random', 'amplitude'):
        assert phase.main([f'--out_dir={tmp_path}', f'--qk_phase={mode}']) == 0
        last = [json.loads(line) for line in open(tmp_path / 'log.jsonl')][-1]
        assert last['val'] == pytest.approx(normal['val'], abs=1e-6)        # the normal loss, unchanged
        # 20 steps leave the attention near uniform, so the re-phased losses are close to the normal
        # ones here; test_set_qk_phase checks that the ablation moves the logits
        assert last['qk_phase']['mode'] == mode and math.isfinite(last['qk_phase']['val'])
        assert f'qk_phase={mode}: train' in capsys.readouterr().out
    # each evaluation of the checkpoint joins the run's log as an eval_only row, the training rows untouched
    rows = [json.loads(line) for line in open(tmp_path / 'log.jsonl')]
    only = [r for r in rows if r['kind'] == 'eval_only']
    assert [r['qk_phase']['mode'] for r in only] == ['random', 'amplitude'] and rows[-2:] == only
    assert [r['iter'] for r in rows if r['kind'] == 'eval'] == [0, 20] and only[0]['bands']
    # dot is re-phased after it computes q and k; a model without attention is a one-line error
    train.train(load_config(train.DEFAULTS, args[:-1] + [f'--out_dir={tmp_path / "dot"}'], train.CHOICES))
    assert phase.main([f'--out_dir={tmp_path / "dot"}', '--qk_phase=random']) == 0
    last = [json.loads(line) for line in open(tmp_path / 'dot' / 'log.jsonl')][-1]
    assert last['qk_phase']['where'] == 'qk' and math.isfinite(last['qk_phase']['val'])
    train.train(load_config(train.DEFAULTS, args[:-1] + [f'--out_dir={tmp_path / "fnet"}', '--attn=fnet'],
                            train.CHOICES))
    capsys.readouterr()
    assert phase.main([f'--out_dir={tmp_path / "fnet"}', '--qk_phase=random']) == 2
    assert 'has no attention, so no q and k to re-phase' in capsys.readouterr().err
