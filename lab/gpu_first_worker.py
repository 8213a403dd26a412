"""
What a preflight worker process runs (python -m lab.gpu_first --worker=JOB): 'speed', a paper
run's compiled training step timed alone and with the others, or 'check', compiled against eager
form by form; it talks to the main process by files in the job's folder. Also the comparisons of
gradients and logits the fused check shares.
"""

import json
import math
import os
import statistics
import time
import traceback

from lab.gpu_first_base import COMPILE_TOL, first_line, parse_spec, read_json


# ----------------------------------------------------------------------------- the workers themselves


def grads_of(m):
    return {n: p.grad.detach().float().clone() for n, p in m.named_parameters() if p.grad is not None}


def rel_diff(a, b, ref=None):
    """max |a - b| relative to max |ref| (default b)."""
    ref = b if ref is None else ref
    d = (a - b).abs().max().item()
    return d / max(ref.abs().max().item(), 1e-6) if math.isfinite(d) else float('inf')


def grad_diff(ga, gb, ref=None, floor=0.0):
    """The worst parameter's max |ga - gb|, relative to its largest gradient in `ref` (default gb),
    floored at `floor` (round-off of a gradient that cancels to about 0, such as the bias of EGA's
    z-normalised energy, is not a difference); (value, parameter name). A parameter with a gradient on
    one side only is infinite."""
    ref = gb if ref is None else ref
    if set(ga) != set(gb):
        return float('inf'), sorted(set(ga) ^ set(gb))[0]
    worst, name = 0.0, ''
    for n, g in gb.items():
        d = (ga[n] - g).abs().max().item()
        r = d / max(ref[n].abs().max().item(), floor, 1e-12) if math.isfinite(d) else float('inf')
        if r > worst or not math.isfinite(r):
            worst, name = r, n
    return worst, name


def worker_main(path):
    """A preflight worker: 'speed' (a paper run's compiled training step, timed alone and with the
    others) or 'check' (compiled against eager, form by form). Talks to the main process by files."""
    with open(path) as f:
        job = json.load(f)
    d, name = job['dir'], job['name']
    try:
        (speed_worker if job['kind'] == 'speed' else check_worker)(job)
        return 0
    except Exception as e:      # noqa: BLE001
        traceback.print_exc()
        with open(os.path.join(d, f'{name}.error.json'), 'w') as f:
            json.dump(dict(error=first_line(e)), f)
        return 1


def wait_for(path, deadline, poll=0.02):
    while not os.path.exists(path):
        if time.time() > deadline:
            raise TimeoutError(f"no {os.path.basename(path)} before the deadline")
        time.sleep(poll)


def setup_torch(job):
    import torch
    from runtime import autocast
    torch.set_num_threads(job['threads'])
    dev = job['device']
    dtype_name, _ = autocast(dev.split(':')[0], 'auto')
    if dev.startswith('cuda'):
        torch.backends.cuda.matmul.allow_tf32 = True        # as train.py
        torch.backends.cudnn.allow_tf32 = True
    return torch, dev, dtype_name


def amp_ctx(torch, dev, dtype_name):
    import contextlib
    if dtype_name == 'float32':
        return contextlib.nullcontext()
    return torch.autocast(dev.split(':')[0], dtype=getattr(torch, dtype_name))


def sync(torch, dev):
    if dev.startswith('cuda'):
        torch.cuda.synchronize()


def graph_breaks():
    try:
        from torch._dynamo.utils import counters
        return sum(counters['graph_break'].values())
    except Exception:       # noqa: BLE001
        return None


def speed_worker(job):
    """train.py's training step of one paper run (the same model, AdamW, autocast, clip, compile), its
    first step (compile) timed, then `alone_steps` steps when the main process says go, then as many
    steps as fit in the shared window, all workers at once."""
    torch, dev, dtype_name = setup_torch(job)
    from model import GPT, GPTConfig
    d, name, t = job['dir'], job['name'], job['train']
    cuda = dev.startswith('cuda')
    cfg = GPTConfig(vocab_size=job['vocab_size'], **job['cfg'])
    torch.manual_seed(job['seed'])
    raw = GPT(cfg).to(dev)
    opt = raw.configure_optimizers(t['weight_decay'], t['learning_rate'], (t['beta1'], t['beta2']), dev.split(':')[0])
    scaler = torch.amp.GradScaler(dev.split(':')[0], enabled=dtype_name == 'float16')
    m = torch.compile(raw, backend=job['backend']) if job['backend'] else raw
    B, T = t['batch_size'], cfg.block_size
    g = torch.Generator().manual_seed(job['seed'])
    x = torch.randint(cfg.vocab_size, (B, T), generator=g).to(dev)
    y = torch.randint(cfg.vocab_size, (B, T), generator=g).to(dev)

    def step():
        with amp_ctx(torch, dev, dtype_name):
            _, loss = m(x, y)
        scaler.scale(loss).backward()
        if t['grad_clip'] > 0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(raw.parameters(), t['grad_clip'])
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.item()          # a sync, as train.py's loss_sum.item()

    t0 = time.perf_counter()
    first = step()
    sync(torch, dev)
    compile_s = time.perf_counter() - t0
    for _ in range(job['warm']):
        step()
    first_peak = 0.0
    if cuda:
        first_peak = round(torch.cuda.max_memory_allocated() / 2**20, 1)      # compile and warm-up steps
        torch.cuda.reset_peak_memory_stats()
    with open(os.path.join(d, f'{name}.ready.json.tmp'), 'w') as f:
        json.dump(dict(compile_s=round(compile_s, 2), first_loss=first, dtype=dtype_name,
                       params=raw.num_params(), graph_breaks=graph_breaks(), first_peak_mib=first_peak), f)
    os.replace(os.path.join(d, f'{name}.ready.json.tmp'), os.path.join(d, f'{name}.ready.json'))
    wait_for(os.path.join(d, f'{name}.go'), job['deadline'])
    times = []
    for _ in range(job['alone_steps']):
        t1 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t1)
    ms = statistics.median(times) * 1000
    alone = dict(ms=round(ms, 2), tok_s=round(B * T / ms * 1000), steps=len(times))
    if cuda:
        alone.update(peak_mib=round(torch.cuda.max_memory_allocated() / 2**20, 1),
                     reserved_mib=round(torch.cuda.max_memory_reserved() / 2**20, 1))
    else:
        alone.update(peak_mib=0.0, reserved_mib=0.0)
    with open(os.path.join(d, f'{name}.alone.json.tmp'), 'w') as f:
        json.dump(alone, f)
    os.replace(os.path.join(d, f'{name}.alone.json.tmp'), os.path.join(d, f'{name}.alone.json'))
    wait_for(os.path.join(d, 'all.go'), job['deadline'])
    go = read_json(os.path.join(d, 'all.go'))
    if not go:
        return
    while time.time() < go['t_start']:
        time.sleep(0.001)
    times = []
    while time.time() < go['t_start'] + go['dur']:
        t1 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t1)
    with open(os.path.join(d, f'{name}.shared.json'), 'w') as f:
        json.dump(dict(steps=len(times), ms=round(statistics.median(times) * 1000, 2) if times else None), f)


def check_worker(job):
    """Compiled against eager, form by form: the same weights and batch through the eager model and
    torch.compile (first call: compile and one forward and backward, timed), its loss, logits and
    gradients compared; then one more compiled step and one eager step, timed. dropout 0 (compiled and
    eager dropout draw different masks). Results appended to compile_check.check.json as they come."""
    torch, dev, dtype_name = setup_torch(job)
    from model import GPT, GPTConfig
    d = job['dir']
    size = dict(job['cfg'])
    B = size.pop('batch')
    results = []
    for form in job['forms']:
        attn, pos = parse_spec(form)
        row = dict(form=form, dtype=dtype_name)
        try:
            torch.manual_seed(job['seed'])
            cfg = GPTConfig(attn=attn, pos=pos, dropout=0.0, vocab_size=job['vocab_size'], **size)
            m = GPT(cfg).to(dev).train()
            g = torch.Generator().manual_seed(job['seed'])
            x = torch.randint(cfg.vocab_size, (B, cfg.block_size), generator=g).to(dev)
            y = torch.randint(cfg.vocab_size, (B, cfg.block_size), generator=g).to(dev)

            def run(model):
                m.zero_grad(set_to_none=True)
                with amp_ctx(torch, dev, dtype_name):
                    logits, loss = model(x, y)
                loss.backward()
                sync(torch, dev)
                return logits.detach().float(), loss.item(), grads_of(m)
            le, loss_e, ge = run(m)
            t1 = time.perf_counter()
            run(m)
            eager_ms = (time.perf_counter() - t1) * 1000
            breaks = graph_breaks()
            cm = torch.compile(m, backend=job['backend']) if job['backend'] else m
            t0 = time.perf_counter()
            lc, lossc, gc = run(cm)
            row['compile_s'] = round(time.perf_counter() - t0, 2)
            t1 = time.perf_counter()
            run(cm)
            row['step_ms'] = round((time.perf_counter() - t1) * 1000, 2)
            row['eager_ms'] = round(eager_ms, 2)
            b2 = graph_breaks()
            row['graph_breaks'] = None if breaks is None or b2 is None else b2 - breaks
            row['loss_eager'], row['loss_compiled'] = loss_e, lossc
            row['loss_rel'] = abs(lossc - loss_e) / max(abs(loss_e), 1e-6)
            row['logits_rel'] = rel_diff(lc, le)
            row['grads_rel'], row['grads_worst'] = grad_diff(gc, ge, ge, 1e-2 * max(
                (v.abs().max().item() for v in ge.values()), default=0.0))
            ok = (row['loss_rel'] <= COMPILE_TOL['loss'] and row['logits_rel'] <= COMPILE_TOL['logits']
                  and row['grads_rel'] <= COMPILE_TOL['grads'])
            row['status'] = 'PASS' if ok else 'FAIL'
            del m, cm
        except Exception as e:      # noqa: BLE001
            traceback.print_exc()
            row['status'] = 'FAILED: ' + first_line(e)
        results.append(row)
        with open(os.path.join(d, 'compile_check.check.json.tmp'), 'w') as f:
            json.dump(results, f)
        os.replace(os.path.join(d, 'compile_check.check.json.tmp'), os.path.join(d, 'compile_check.check.json'))
        if dev.startswith('cuda'):
            torch.cuda.empty_cache()
        if time.time() > job['deadline']:
            break
