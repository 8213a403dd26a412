"""
The first GPU command's kernel phases: which SDPA kernel every variant gets in one bf16 training
step (2b); the fused SDPA path and, on CUDA, FlexAttention against the plain formula for every
registered form (2c), logits and gradients, in float32 and bf16 autocast.
"""

import time

from lab.gpu_first_base import DEFAULTS, TOL, attn_forms, csv, first_line, kernel_specs, parse_spec
from lab.gpu_first_worker import grad_diff, grads_of, rel_diff, sync


# ----------------------------------------------------------------------------- 2b. kernels


SDPA_OPS = (('cudnn', ('_scaled_dot_product_cudnn_attention', '_cudnn_attention')),
            ('flash_cpu', ('_scaled_dot_product_flash_attention_for_cpu',)),
            ('flash', ('_scaled_dot_product_flash_attention', '_flash_attention_forward')),
            ('efficient', ('_scaled_dot_product_efficient_attention', '_efficient_attention_forward')),
            ('math', ('_scaled_dot_product_attention_math',)))
FUSED = ('flash', 'efficient', 'cudnn', 'flash_cpu')


def classify(keys):
    """The SDPA backends named by a profile's op keys: a tuple of FUSED / 'math', or ('plain',) where
    no SDPA call ran but a softmax did (attend_plain: explicit T x T), or ('none',) (no attention)."""
    found = []
    for label, needles in SDPA_OPS:
        for k in keys:
            if any(n in k for n in needles) and not (label == 'flash' and 'for_cpu' in k):
                found.append(label)
                break
    if found:
        return tuple(found)
    if any(k in ('aten::softmax', 'aten::_softmax', 'aten::_safe_softmax') for k in keys):
        return ('plain',)
    return ('none',)


def backend_note(backends):
    if 'math' in backends:
        return 'MATH PATH: full T x T weights (no fused kernel took it)'
    if backends == ('plain',):
        return 'attend_plain: explicit T x T weights (a logit map, by design)'
    if backends == ('none',):
        return 'no attention (token mixer)'
    return 'fused: no T x T weights'


def phase_kernels(ctx):
    import torch
    from torch.profiler import ProfilerActivity, profile
    from model import GPT, GPTConfig
    c, size = ctx.c, dict(ctx.size['kernel'])
    B = size.pop('batch')
    cuda = ctx.dev.startswith('cuda')
    dtype = 'bfloat16' if cuda and torch.cuda.is_bf16_supported() else ('float16' if cuda else 'bfloat16')
    stop = ctx.clock.now() + ctx.size['kernels_cap']
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    specs = kernel_specs(c.variants)
    for spec in specs:
        attn, pos = parse_spec(spec)
        row = dict(variant=spec, attn=attn, pos=pos, dtype=dtype)
        ctx.kernels.append(row)
        t_row = time.time()
        if ctx.clock.now() > stop:
            row.update(backend='-', status='skipped: the kernels cap', note='')
            continue
        try:
            torch.manual_seed(c.seed)
            m = GPT(GPTConfig(attn=attn, pos=pos, dropout=0.1, **size)).to(ctx.dev).train()
            x = torch.randint(65, (B, size['block_size']), device=ctx.dev)

            def step():
                with torch.autocast(ctx.dev.split(':')[0], dtype=getattr(torch, dtype)):
                    _, loss = m(x, x)
                loss.backward()
                m.zero_grad(set_to_none=True)
            step()                              # lazy inits (cuFFT plans, workspaces) outside the profile
            try:
                with profile(activities=acts) as prof:
                    step()
                    sync(torch, ctx.dev)
            except Exception as e:      # noqa: BLE001 - CUPTI missing: the op names still tell
                if len(acts) == 1:
                    raise
                acts = [ProfilerActivity.CPU]
                row['profiler'] = f'CPU only ({first_line(e)})'
                with profile(activities=acts) as prof:
                    step()
                    sync(torch, ctx.dev)
            keys = sorted({e.key for e in prof.key_averages()})
            ops = [k for k in keys if 'scaled_dot_product' in k or 'attention' in k.lower()
                   and k.startswith('aten::')]
            kernels = [k[:90] for k in keys if not k.startswith('aten::') and any(
                w in k.lower() for w in ('flash', 'fmha', 'attention', 'cudnn', 'sdpa'))]
            b = classify(keys)
            row.update(backend='+'.join(b), ops=ops or [k for k in keys if 'softmax' in k][:3],
                       kernels=kernels[:4], note=backend_note(b), status='ok', s=round(time.time() - t_row, 2))
            del m
        except Exception as e:      # noqa: BLE001
            row.update(backend='-', status='FAILED: ' + first_line(e), note='')
    if cuda:
        torch.cuda.empty_cache()
    math_rows = [r['variant'] for r in ctx.kernels if 'math' in r.get('backend', '')]
    for r in ctx.kernels:
        if 'math' in r.get('backend', ''):
            ctx.say(f"kernels: {r['variant']} falls back to the MATH path (full T x T weights)")
    ctx.say(f"kernels: {len(ctx.kernels)} variants; " + ', '.join(
        f"{k} {sum(r.get('backend') == k for r in ctx.kernels)}" for k in
        sorted({r.get('backend', '-') for r in ctx.kernels})))
    bad = [r for r in ctx.kernels if r['status'] != 'ok']
    if bad:
        return f"partial: {len(bad)} of {len(ctx.kernels)} not profiled ({bad[0]['variant']}: {bad[0]['status']})"
    return f"{len(math_rows)} on the math path" if math_rows else ''


# ----------------------------------------------------------------------------- 2c. fused vs plain


def fused_pairs(only, pos_list):
    """(form key, GPTConfig fields, pos) in the order a cap cuts least: every form with the first
    encoding, then each attention's default form with the others, then the other forms with them."""
    from model import FNET_POS
    forms = attn_forms(only)
    first_form = {}
    for key, f in forms.items():
        first_form.setdefault(f['attn'], key)
    pairs = [(k, f, p) for k, f in forms.items() for p in pos_list if f['attn'] != 'fnet' or p in FNET_POS]

    def rank(x):
        k, f, p = x
        return (0 if p == pos_list[0] else 1 if first_form[f['attn']] == k else 2)
    return sorted(pairs, key=rank)      # stable: the registry's order inside each rank


def fused_check(ctx, form, pos, size, B):
    """One (form, pos): logits and gradients through the fused SDPA path, and on CUDA through
    FlexAttention ('flex:' keys: its backward runs there alone), each against the plain formula
    (model.GPT.set_impl), float32 then bf16 autocast, on one model with perturbed weights.
    {path and dtype: dict(logits, grads, worst)} and the verdict against TOL."""
    import torch
    from model import GPT, GPTConfig
    c, dev_type = ctx.c, ctx.dev.split(':')[0]
    torch.manual_seed(c.seed)
    m = GPT(GPTConfig(pos=pos, dropout=0.0, **form, **size)).to(ctx.dev).train()
    g = torch.Generator().manual_seed(c.seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g).to(p.device))
    idx = torch.randint(65, (B, size['block_size']), generator=g).to(ctx.dev)
    tgt = torch.randint(65, (B, size['block_size']), generator=g).to(ctx.dev)

    def run(dtype, impl):
        m.zero_grad(set_to_none=True)
        m.set_impl(impl)
        with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=dtype == 'bfloat16'):
            logits, loss = m(idx, tgt)
        loss.backward()
        return logits.detach().float(), grads_of(m)
    ref_l, ref_g = run('float32', 'plain')     # the reference: the plain formula in float32
    top = max((g.abs().max().item() for g in ref_g.values()), default=0.0)
    out_, verdict = {}, 'PASS'
    for impl in ('sdpa', 'flex') if ctx.dev.startswith('cuda') else ('sdpa',):
        for dtype in ('float32', 'bfloat16'):
            lf, gf = run(dtype, impl)
            lp, gp = (ref_l, ref_g) if dtype == 'float32' else run(dtype, 'plain')
            tl, tg, floor = TOL[dtype]
            row = dict(logits=rel_diff(lf, lp, ref_l), grads=None, worst='')
            row['grads'], row['worst'] = grad_diff(gf, gp, ref_g, floor * top)
            ok = row['grads'] <= tg
            if dtype != 'float32':      # each path against the float32 reference: is the kernel less exact?
                row['fused_vs_f32'] = grad_diff(gf, ref_g, ref_g, floor * top)[0]
                row['plain_vs_f32'] = grad_diff(gp, ref_g, ref_g, floor * top)[0]
                # a gradient that bf16 rounds away on both paths (a bias that z-normalisation cancels)
                # differs by round-off: it passes where it is no further from float32 than the plain one
                ok = ok or row['fused_vs_f32'] <= 1.5 * row['plain_vs_f32'] + 0.02
            out_[dtype if impl == 'sdpa' else f'flex:{dtype}'] = row
            if not (row['logits'] <= tl and ok):
                verdict = 'FAIL' if impl == 'sdpa' else verdict if verdict == 'FAIL' else 'FAIL (flex)'
    m.set_impl('auto')
    return out_, verdict


def phase_fused(ctx):
    import torch
    c, size = ctx.c, dict(ctx.size['fused'])
    B = size.pop('batch')
    stop = ctx.clock.now() + ctx.size['fused_cap']
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False           # float32 as float32
    pos_list = csv(c.fused_pos)
    if c.toy and c.fused_pos == DEFAULTS['fused_pos']:
        pos_list = ['learned']
    try:
        for key, form, pos in fused_pairs(c.variants, pos_list):
            row = dict(form=key, pos=pos)
            ctx.fused.append(row)
            if ctx.clock.now() > stop:
                row['status'] = 'skipped: the fused cap'
                continue
            try:
                res, row['status'] = fused_check(ctx, form, pos, size, B)
                row.update(res)
            except Exception as e:      # noqa: BLE001
                row['status'] = 'FAILED: ' + first_line(e)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        if ctx.dev.startswith('cuda'):
            torch.cuda.empty_cache()
    fails = [f"{r['form']} pos={r['pos']}" for r in ctx.fused if r['status'] != 'PASS'
             and not r['status'].startswith('skipped')]
    skipped = sum(r['status'].startswith('skipped') for r in ctx.fused)
    ctx.say(f"fused vs plain: {sum(r['status'] == 'PASS' for r in ctx.fused)} PASS of {len(ctx.fused)}"
            + (f"; not PASS: {', '.join(fails[:6])}" if fails else '')
            + (f"; {skipped} skipped (cap)" if skipped else ''))
    if skipped:
        return f"partial: {skipped} of {len(ctx.fused)} not checked (the cap)"
    return f"{len(fails)} not PASS" if fails else ''
