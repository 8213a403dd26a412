"""
What keeps a run of train.py safe, apart from the loop a reader follows: the checks of a
config, the processes and device, the data, checkpoints written
atomically and read with one-line errors, the random state that makes a resume exact,
the log trimmed to what a resumed run repeats, signals (stop at the next step, save
once; a second one leaves at once), one run per out_dir, and the command line's errors as
one line and an exit code. Also the code's version and the versions a run's log opens with.
Several processes: torchrun (train.py's docstring).
"""

import contextlib
import gc
import hashlib
import io
import json
import math
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, fields, replace
from types import SimpleNamespace

import numpy as np
import torch

try:
    import fcntl        # the lock's flock; a platform without it runs unguarded
except ImportError:
    fcntl = None

from configurator import ConfigError, fail, load_config
from model import ATTN, POS, GPTConfig, attn_options, components, flex_refusal, pos_components, pos_options
from prepare import META, PrepareError, make_dir, read_meta, write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))     # where prepare.py writes data/ by default
CPU_WORK = 1e10                     # parameters x tokens per iter beyond which a CPU takes hours:
                                    # the paper scale is 7.8e10 (~7 s/iter on 2 cores), config/cpu.py 1.6e9
CKPT_KEYS = ('model', 'optimizer', 'scaler', 'model_args', 'iter_num', 'best_val_loss', 'rng')


def model_config(c, vocab_size=GPTConfig.vocab_size):
    try:
        return GPTConfig(vocab_size=vocab_size, **{f.name: getattr(c, f.name)
                                                   for f in fields(GPTConfig) if f.name != 'vocab_size'})
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_run(c):
    """Errors that would otherwise surface deep in a run."""
    model_config(c)
    for k in ('batch_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval', 'eval_iters'):
        if getattr(c, k) < 1:
            raise ConfigError(f"{k} must be >= 1, got {getattr(c, k)}")
    for k in ('max_iters', 'warmup_iters', 'lr_decay_iters'):
        if getattr(c, k) < 0:
            raise ConfigError(f"{k} must be >= 0, got {getattr(c, k)}")
    if not (c.learning_rate > 0 and c.min_lr >= 0 and math.isfinite(c.learning_rate) and math.isfinite(c.min_lr)):
        raise ConfigError(f"learning_rate must be > 0 and min_lr >= 0 (finite), got {c.learning_rate} and {c.min_lr}")
    if not 0 <= c.seed < 2 ** 32 - 64:          # numpy's seed range, less room for one seed per DDP rank
        raise ConfigError(f"seed must be in [0, 2^32 - 64), got {c.seed}")
    for k in ('beta1', 'beta2'):
        if not 0.0 <= getattr(c, k) < 1.0:
            raise ConfigError(f"{k} must be in [0, 1), got {getattr(c, k)}")
    if not (c.weight_decay >= 0 and math.isfinite(c.weight_decay)):
        raise ConfigError(f"weight_decay must be >= 0, got {c.weight_decay}")
    if not c.grad_clip >= 0:
        raise ConfigError(f"grad_clip must be >= 0 (0 turns clipping off), got {c.grad_clip}")
    if c.decay_lr and not c.eval_only and not c.lr_decay_iters and 0 < c.max_iters < c.warmup_iters:
        raise ConfigError(f"max_iters ({c.max_iters}) is shorter than warmup_iters ({c.warmup_iters}): the run "
                          f"would end mid-warm-up, never at min_lr; lower --warmup_iters")
    if not 0 <= c.threads <= 4 * (os.cpu_count() or 1):     # far past the cores, torch's pool crashes
        raise ConfigError(f"threads must be in [0, {4 * (os.cpu_count() or 1)}] (0: torch's choice; this machine "
                          f"has {os.cpu_count()} cores), got {c.threads}")
    if not c.out_dir:
        raise ConfigError("out_dir is empty: name the folder for the checkpoint and log")
    if c.decay_lr and c.lr_decay_iters and c.lr_decay_iters <= c.warmup_iters:
        raise ConfigError(f"lr_decay_iters ({c.lr_decay_iters}) must exceed warmup_iters ({c.warmup_iters}), "
                          f"or be 0 to follow max_iters")
    held = [f for f in ('ckpt.pt', 'log.jsonl') if os.path.exists(os.path.join(c.out_dir, f))] \
        if c.init_from == 'scratch' and not c.eval_only and not c.overwrite else []
    if held:
        raise ConfigError(f"out_dir {c.out_dir} holds a run ({' and '.join(held)}): continue it with "
                          f"--init_from=resume, or replace it with --overwrite=True")
    why = flex_refusal(c.dropout, c.device.startswith('cuda'), True) if c.attn_impl == 'flex' else ''
    if why and not c.eval_only:         # an evaluation has no dropout and no backward: it runs anywhere
        raise ConfigError(f"{why}; eval_only runs it anywhere, and attn_impl=auto picks it where it can run")
    check_device(c.device)
    if c.decay_lr and c.min_lr > c.learning_rate:
        raise ConfigError(f"min_lr ({c.min_lr}) is above learning_rate ({c.learning_rate}): the schedule "
                          f"would raise the rate as it decays; lower --min_lr")
    if c.eval_only and c.init_from == 'scratch':
        raise ConfigError("eval_only evaluates a trained checkpoint: add --init_from=resume")
    if c.overwrite and c.init_from == 'resume':
        raise ConfigError("--overwrite=True replaces the run in out_dir, --init_from=resume " +
                          ("evaluates it (eval_only)" if c.eval_only else "continues it") + ": choose one")
    check_out_dir(c.out_dir)


def check_device(dev):
    """A device name train.py and sample.py accept (whether it is there: resolve_device)."""
    if not (dev in ('auto', 'cpu', 'cuda', 'mps') or (dev.startswith('cuda:') and dev[5:].isdigit())):
        raise ConfigError(f"device={dev!r} is not one of: auto, cpu, cuda, cuda:N, mps")


def check_out_dir(path):
    """out_dir is a writable folder, or one that can be made (its nearest existing parent is a
    writable folder). Nothing is created here."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigError(f"out_dir {path} is a file, not a folder: name a folder for the checkpoint and log")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"out_dir {path} is not writable: pick another --out_dir")
        return
    parent = nearest_existing(os.path.dirname(os.path.abspath(path)))
    if not os.path.isdir(parent):
        raise ConfigError(f"cannot create the out_dir {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot create the out_dir {path}: {parent} is not writable; pick another --out_dir")


def nearest_existing(path):
    """`path`, or the nearest of its parents that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def unread_options(c):
    """A warning for each variant option (a field of some ATTN or POS entry's options) that the
    chosen attn and pos do not read, set to other than GPTConfig's default: surely a mistake."""
    every = dict.fromkeys(o for reg in (ATTN, POS) for v in reg.values() for o in v.options)
    read = attn_options(c.attn) + pos_options(c.pos)
    default = {f.name: f.default for f in fields(GPTConfig)}
    return [f"{o}={getattr(c, o)!r} is not read by attn={c.attn} pos={c.pos} (it reads: "
            f"{', '.join(read) or 'none of the variant options'})"
            for o in every if o not in read and hasattr(c, o) and getattr(c, o) != default[o]]


def ddp_env(env=os.environ):
    """(rank, world size, local rank) of a torchrun launch, None without RANK; a ConfigError of one line for
    a launch torchrun did not make (RANK alone, a value not a number, a rank past the world)."""
    if env.get('RANK', '-1') == '-1':
        part = [k for k in ('WORLD_SIZE', 'LOCAL_RANK') if env.get(k)]
        if part:        # torchrun sets all three: a launch without RANK would train one process, silently
            raise ConfigError(f"{' and '.join(part)} set without RANK: a DDP launch is torchrun's (torchrun "
                              f"--standalone --nproc_per_node=N train.py ...); unset {' and '.join(part)} for one process")
        return None
    need = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')
    missing = [k for k in need if not env.get(k)]
    bad = [f"{k}={env[k]!r}" for k in need[:3] + need[4:] if env.get(k) and not env[k].isdigit()]
    if not missing and not bad and int(env['RANK']) >= int(env['WORLD_SIZE']):
        bad = [f"RANK={env['RANK']} of WORLD_SIZE={env['WORLD_SIZE']}"]
    if missing or bad:
        raise ConfigError("RANK is set, so this is a DDP launch, but " + (f"{', '.join(missing)} unset" if missing
                          else ', '.join(bad) + ' is no rank') + ": launch DDP with torchrun (torchrun --standalone "
                          "--nproc_per_node=N train.py ...), or unset RANK for one process")
    return int(env['RANK']), int(env['WORLD_SIZE']), int(env['LOCAL_RANK'])


class TrainError(Exception):
    pass


def not_written(path, it, e, ckpt_path):
    """A TrainError of one line for a write that failed (a full disk): what was kept and how to go on."""
    return TrainError(f"cannot write {path} at iter {it} ({e.strerror or e}): {checkpoint_left(ckpt_path)}; "
                      f"free some space, then go on with --init_from=resume")


def checkpoint_left(path):
    """The end of a message for a run that stops on an error: what is left to resume from."""
    if os.path.exists(path):
        return f"the last good checkpoint {path} is left as it was"
    return f"no checkpoint was written to {path} (nothing to resume)"


class Interrupted(Exception):
    """A second SIGINT/SIGTERM: leave at once, without saving."""

    def __init__(self, signum):
        super().__init__(f"signal {signum} again: left at once, without saving "
                         f"(the last checkpoint written is intact)")
        self.signum = signum


def resolve_device(dev):
    mps = getattr(torch.backends, 'mps', None)
    if dev == 'auto':
        dev = 'cuda' if torch.cuda.is_available() else 'mps' if mps and mps.is_available() else 'cpu'
    if dev.startswith('cuda') and not torch.cuda.is_available():
        raise ConfigError(f"device={dev} but CUDA is not available")
    if dev == 'mps' and not (mps and mps.is_available()):
        raise ConfigError("device=mps but MPS is not available here (it needs Apple silicon and a torch with MPS)")
    return dev


# torch.compile's modes a run may take: reduce-overhead replays each step as CUDA graphs (one launch
# for the step's kernels: the host's launch time gone, a static memory pool), the third tunes
# inductor's kernels (minutes of compile) without the graphs
COMPILE_MODES = ('default', 'reduce-overhead', 'max-autotune-no-cudagraphs')


def due_eval(c, it):
    return it % c.eval_interval == 0 or it == c.max_iters


def scale_note(params, tokens_per_iter, files=()):
    """One line for a CPU run of GPU size, or ''. Parameters x tokens is the work of a step."""
    if params * tokens_per_iter <= CPU_WORK:
        return ''
    work = f"note: {params / 1e6:.1f}M parameters x {tokens_per_iter:,} tokens/iter"
    rest = [f for f in files if os.path.basename(f) != 'cpu.py']
    if len(rest) < len(files):      # the overlay is on: the size comes from elsewhere, e.g. a GPT-2 vocabulary
        return f"{work} is more than the CPU study scale even with config/cpu.py: expect slow steps on a CPU"
    return (f"{work} is GPU scale, hours on a CPU; for the CPU study scale add the overlay: "
            f"python train.py {' '.join(rest or ['config/ega_mope.py'])} config/cpu.py")


def find_data_dir(d):
    """data_dir, and the places looked in. A relative one missing from the working directory is
    taken next to this file, where prepare.py writes, so that both agree from any directory."""
    if os.path.isabs(d) or os.path.exists(d):
        return d, [d]
    here = os.path.join(HERE, d)
    return (here if os.path.exists(here) else d), list(dict.fromkeys([os.path.abspath(d), here]))


def file_digest(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def data_digest(d):
    """The data's identity: sha256 over meta.json, train.bin and val.bin (a checkpoint records it, and a
    resume on other data is refused)."""
    h = hashlib.sha256()
    for name in (META, 'train.bin', 'val.bin'):
        with open(os.path.join(d, name), 'rb') as f:
            for block in iter(lambda: f.read(1 << 22), b''):
                h.update(block)
    return h.hexdigest()


def load_data(c):
    d, looked = find_data_dir(c.data_dir)
    for name in ('train.bin', 'val.bin'):
        if not os.path.exists(os.path.join(d, name)):
            raise ConfigError(f"{name} not found in {' nor in '.join(looked)}: "
                              f"run `python prepare.py` (or set data_dir)")
    data = {}
    for s in ('train', 'val'):
        p = os.path.join(d, f'{s}.bin')
        size = os.path.getsize(p)
        if size % 2:
            raise ConfigError(f"{p} has {size:,} bytes, not a whole number of uint16 tokens "
                              f"(cut short?): run `python prepare.py` again")
        if size // 2 <= c.block_size:
            raise ConfigError(f"{p} has {size // 2} tokens, too few for block_size={c.block_size}")
        data[s] = np.memmap(p, dtype=np.uint16, mode='r')
    try:
        meta = read_meta(os.path.join(d, META))     # JSON: a data folder from elsewhere runs no code
    except PrepareError as e:
        raise ConfigError(str(e)) from None
    vocab = meta['vocab_size']
    meta['sha256'] = data_digest(d)
    meta['meta_sha256'] = file_digest(os.path.join(d, META))    # the vocabulary alone: sample.py checks it
    for s, ids in data.items():     # one pass over the tokens: an id past the vocabulary fails here, not mid-run
        top = int(ids.max())
        if top >= vocab:
            raise ConfigError(f"{os.path.join(d, s + '.bin')} holds token id {top}, outside the vocabulary of "
                              f"its {META} ({vocab}): the .bin and {META} are of different runs of "
                              f"prepare.py; run it again")
    return d, data, meta


# What a checkpoint of train.py before 2026-12-05 holds beyond tensors and plain values: numpy's RNG
# state, pickled as an array (numpy 1 and 2 name its constructor apart). A file that needs these names
# alone is one of ours, and lab/convert.py rewrites it, reading it with exactly these allowed.
OLD_CHECKPOINT_NAMES = ('numpy.core.multiarray._reconstruct', 'numpy._core.multiarray._reconstruct',
                        'numpy.ndarray', 'numpy.dtype')


def load_checkpoint(path, keys=CKPT_KEYS):
    """ckpt.pt as a dict and its GPTConfig (check_checkpoint), read with weights_only=True, so that a
    file from elsewhere runs no code; or a one-line ConfigError for a file cut short, not a checkpoint,
    or one that needs more than tensors and plain values (advised to convert only where it is one of
    train.py's from before 2026-12-05)."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path} " + ("is not a regular file" if os.path.exists(path) else "does not exist") +
                          ": no checkpoint there (train first, or point at the run's ckpt.pt)")
    try:
        ck = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:
        detail = (str(e).strip().splitlines() or [''])[0]        # its first line, whole
        if 'Weights only load failed' in str(e):     # torch's safe load refused something: no code ran
            raise ConfigError(unsafe_names(path)) from None
        raise ConfigError(f"{path} is not a readable checkpoint, cut short or another kind of file "
                          f"({type(e).__name__}: {detail})") from None
    return check_checkpoint(ck, path, keys)


def unsafe_names(path):
    """Why a file the safe load refused is not loaded, naming what it needs (read off its pickle's
    opcodes, which runs nothing). Only a file that needs numpy's array alone is told to convert."""
    try:
        names = sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:           # an old torch without it, or no zip inside
        names = []
    if names and set(names) <= set(OLD_CHECKPOINT_NAMES):
        return (f"{path} is a checkpoint of train.py before 2026-12-05 (numpy's RNG state pickled as an array), "
                f"which does not load with weights_only=True: python -m lab.convert --ckpt={shlex.quote(path)} "
                f"rewrites it, reading it with numpy's array alone allowed (no code runs)")
    other = [n for n in names if n not in OLD_CHECKPOINT_NAMES]
    return (f"{path} holds more than tensors and plain values ({', '.join(other[:4]) or 'what torch refused'}"
            f"{', ...' if len(other) > 4 else ''}): not loaded, since a file that names code can run it; no "
            f"checkpoint of train.py names {'them' if len(other) > 1 else 'it'}")


# what each field of a checkpoint is, as train.py writes it (a file from elsewhere is checked against it)
CKPT_TYPES = {'model': dict, 'optimizer': dict, 'scaler': dict, 'model_args': dict, 'iter_num': int,
              'best_val_loss': float, 'rng': dict, 'config': dict, 'audit': dict, 'data': dict, 'param_names': list}


def memory_bytes():
    """This machine's memory, or None where the platform does not say."""
    try:
        return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    except (AttributeError, ValueError, OSError):
        return None


def check_checkpoint(ck, path, keys=CKPT_KEYS):
    """A loaded checkpoint's keys, the type of every field train.py writes (CKPT_TYPES), and its model config
    checked, the model's size included before anything is built: (ck, its GPTConfig), or a one-line ConfigError."""
    missing = [k for k in keys if k not in ck] if isinstance(ck, dict) else list(keys)
    if missing:
        raise ConfigError(f"{path} is not a checkpoint of train.py (no {', '.join(missing)})")
    for k, kind in CKPT_TYPES.items():
        v = ck.get(k)
        ok = v is None and k not in keys or (isinstance(v, (int, float)) and not isinstance(v, bool) if kind is float
                                             else isinstance(v, kind) and not isinstance(v, bool))
        if not ok:
            raise ConfigError(f"{path}: its {k} is a {type(v).__name__}, not the {kind.__name__} train.py writes "
                              f"(a checkpoint edited, or written by other code)")
    if 'iter_num' in ck and ck['iter_num'] < 0:
        raise ConfigError(f"{path}: its iter_num {ck['iter_num']} is no step count")
    if 'model' in ck and not all(isinstance(k, str) and torch.is_tensor(v) for k, v in ck['model'].items()):
        raise ConfigError(f"{path}: its model holds more than named tensors (a checkpoint edited, or written by "
                          f"other code)")
    try:
        cfg = GPTConfig(**ck['model_args'])
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: its model does not fit this model.py ({e})") from None
    C, mem = cfg.n_embd, memory_bytes()
    size = 4 * (cfg.vocab_size * C + cfg.block_size * C + 12 * cfg.n_layer * C * C)   # float32 bytes, roughly
    if mem and size > mem // 2:             # a shared checkpoint must not take the machine's memory
        raise ConfigError(f"{path}: its model (n_layer={cfg.n_layer}, n_embd={C}, vocab_size={cfg.vocab_size}, "
                          f"block_size={cfg.block_size}) needs about {size / 2 ** 30:,.0f} GiB of float32 weights, "
                          f"over half this machine's {mem / 2 ** 30:,.0f} GiB: not built")
    return ck, cfg


def rng_state(device_type):
    """Every generator's state as tensors and plain values (a checkpoint loads with weights_only=True):
    numpy's key array becomes a list of ints."""
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    return {'python': random.getstate(), 'numpy': (kind, key.tolist(), pos, has_gauss, gauss),
            'torch': torch.get_rng_state(), 'cuda': torch.cuda.get_rng_state_all() if device_type == 'cuda' else None}


def set_rng_state(s, device_type):
    random.setstate(s['python'])
    kind, key, pos, has_gauss, gauss = s['numpy']
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(s['torch'])
    if device_type == 'cuda' and s['cuda'] is not None:
        torch.cuda.set_rng_state_all(s['cuda'])


def save_atomic(obj, path):
    buf = io.BytesIO()
    torch.save(obj, buf)
    write_atomic({path: buf.getvalue()})    # a crash mid-write never leaves half a checkpoint


class OutDirLock:
    """One run per out_dir: run.lock holds 'pid host' of the run that owns the folder, and a second train.py there
    is refused in one line. A lock whose process is gone from this host, or that holds no 'pid host' (a crash or a
    full disk left it), is stale and taken over, under an flock of the folder (dropped when its process dies,
    whatever kills it), so that two runs that find one stale lock cannot both take it."""

    def __init__(self, out_dir):
        self.path, self.mine = os.path.join(out_dir, 'run.lock'), f"{os.getpid()} {socket.gethostname()}"

    def holder(self):
        """The live run holding the lock, as (pid, host), or None where it is free or stale."""
        try:
            with open(self.path) as f:
                pid, _, host = f.read().strip().partition(' ')
            if pid.isdigit() and host == socket.gethostname():
                os.kill(int(pid), 0)                # ProcessLookupError where it is gone
        except PermissionError:                     # alive, another user's
            pass
        except OSError:
            return None
        return (pid, host) if pid.isdigit() and host else None

    def acquire(self):
        """The lock taken, out_dir made where missing; or a one-line error (released by train.py at the end)."""
        try:
            make_dir(os.path.dirname(self.path) or '.', 'out_dir')
            fd = os.open(os.path.dirname(self.path) or '.', os.O_RDONLY)
        except (PrepareError, OSError) as e:
            raise TrainError(str(e)) from None
        try:
            with contextlib.suppress(AttributeError, OSError):     # no fcntl, or no flock there: unguarded
                fcntl.flock(fd, fcntl.LOCK_EX)
            held = self.holder()
            if held:
                raise ConfigError(f"out_dir {os.path.dirname(self.path)} is in use by another run (pid {held[0]} on "
                                  f"{held[1]}, {self.path}): wait for it to end, or use another out_dir" +
                                  ('' if held[1] == socket.gethostname() else "; that host is not this one, so its "
                                   f"process cannot be checked from here: if the run is gone, delete {self.path}"))
            write_atomic({self.path: (self.mine + '\n').encode()})     # whole or not at all
        except OSError as e:
            raise ConfigError(f"cannot write {self.path} ({e.strerror or e}): a full disk? nothing was started") \
                from None
        finally:
            os.close(fd)                            # closing drops the flock
        return self

    def release(self):
        with contextlib.suppress(OSError):
            with open(self.path) as f:
                mine = f.read().strip() == self.mine
            if mine:
                os.remove(self.path)


def trim_log(path, c, it):
    """Resuming at `it`: drop the rows written after the checkpoint, and the eval at `it` that
    the resumed run repeats, so that every iteration is in log.jsonl once."""
    if not os.path.exists(path):
        return
    keep = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
                stays = rec['iter'] < it or (rec['iter'] == it and not (rec['kind'] == 'eval' and due_eval(c, it)))
            except (ValueError, KeyError, TypeError):
                stays = False           # a line cut by a kill
            if stays:
                keep.append(line.rstrip('\n') + '\n')
    write_atomic({path: ''.join(keep).encode()})


class Stop:
    """SIGINT/SIGTERM handler. The first asks the run to stop: the eval and gradient-accumulation
    loops check `sig`, and the loop saves one checkpoint. A second one of the same kind (Ctrl-C
    twice) leaves at once; ckpt.pt stays the last one completed (write_atomic). A SIGTERM soon
    after a SIGINT is the same request relayed: torchrun answers a Ctrl-C by sending its workers
    SIGTERM, which must not cut their save short. No print here: a print inside a print raises."""
    RELAY_S = 30.0

    def __init__(self):
        self.sig, self.at = 0, 0.0

    def __call__(self, signum, frame):
        if self.sig:
            if signum != self.sig and time.time() - self.at < self.RELAY_S:
                return
            raise Interrupted(signum)
        self.sig, self.at = signum, time.time()


def stop_signal(sig, ddp, device):
    """The signal the run stops for: this rank's, or under DDP any rank's (all stop at one step)."""
    if ddp:
        flag = torch.tensor([sig], device=device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        sig = int(flag.item())
    return sig


def optimizer_names(model, optimizer):
    """The parameters' names in the order the optimizer keeps its state (by position, over its
    groups): what a checkpoint records, so that a resume can tell its state fits."""
    name = {id(p): n for n, p in model.named_parameters()}
    return [name[id(p)] for g in optimizer.param_groups for p in g['params']]


def optimizer_fits(ckpt, model, optimizer):
    """Whether a checkpoint's optimizer state lists the parameters in this code's order. A
    checkpoint records the names (optimizer_names); an older one, without them, is checked by
    the shapes of its state, which every reordering made so far changes (EGA's alpha and tau and
    conv's lag kernel once came before the attention's c_attn weight)."""
    if 'param_names' in ckpt:
        return ckpt['param_names'] == optimizer_names(model, optimizer)
    params = [p for g in optimizer.param_groups for p in g['params']]
    state = ckpt['optimizer'].get('state', {})
    return len(state) <= len(params) and all(
        i not in state or state[i]['exp_avg'].shape == p.shape for i, p in enumerate(params))


def load_weights(model, weights, path):
    """A checkpoint's weights into the model its recorded config builds, or a one-line error where they
    do not fit it (a checkpoint edited, or written by other code): names missing, unexpected, reshaped."""
    weights = {k.removeprefix('_orig_mod.'): v for k, v in weights.items()}     # saved from a compiled model
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))
    both = sorted(set(own) & set(weights))
    reshaped = [k for k in both if own[k].shape != weights[k].shape]
    retyped = [k for k in both if own[k].is_floating_point() != weights[k].is_floating_point()]
    if missing or extra or reshaped or retyped:
        what = [f"{len(v)} {w} ({v[0]}{', ...' if len(v) > 1 else ''})" for v, w in (
            (missing, 'missing'), (extra, 'unexpected'), (reshaped, 'of another shape'), (retyped, 'not floats')) if v]
        raise ConfigError(f"{path}: its weights do not fit the model its config describes: {'; '.join(what)} "
                          f"(a checkpoint edited, or written by other code)")
    bad = next((k for k in both if own[k].is_floating_point() and not torch.isfinite(weights[k]).all()), None)
    if bad:
        raise ConfigError(f"{path}: its weight {bad} is not finite (NaN or inf): no model to run")
    model.load_state_dict(weights)


def load_state(ckpt, path, model, optimizer, scaler, ddp, device_type, eval_only=False):
    """A checkpoint's state into a new run's model, optimizer and scaler (where its optimizer state
    fits: optimizer_fits), and its random state (alone; under DDP each step reseeds every rank).
    Returns (iter, best val)."""
    load_weights(model, ckpt['model'], path)
    fits = optimizer_fits(ckpt, model, optimizer)
    if not fits and not eval_only:
        raise ConfigError(f"{path} lists its parameters in another order than this code: its "
                          "weights load (sample.py, --eval_only=True), but its optimizer state does not "
                          "fit; resume it at the commit it started from (run.json), or start afresh "
                          "with --overwrite=True")
    try:        # a state of another shape than train.py writes: one line, not the traceback deep in torch
        if fits:
            optimizer.load_state_dict(ckpt['optimizer'])
            scaler.load_state_dict(ckpt['scaler'])
        if not ddp:
            set_rng_state(ckpt['rng'], device_type)
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as e:
        raise ConfigError(f"{path}: its optimizer or random state is not one train.py writes ({type(e).__name__}: "
                          f"{(str(e).splitlines() or [''])[0][:150]}; a checkpoint edited, or written by other code)") \
            from None
    return ckpt['iter_num'], ckpt['best_val_loss']


def same_setting(key, a, b):
    """Two values of a GPTConfig field that build the same model: equal, or two spellings of one
    composition (ega_fox, ega+fox, fox+ega)."""
    if key in ('attn', 'pos') and a != b:
        parts = components if key == 'attn' else pos_components
        return parts(a) == parts(b)
    return a == b


def load_resume(path, c, gptconf, meta, data_dir):
    """(the checkpoint, its GPTConfig) for --init_from=resume, or a one-line ConfigError where it does
    not fit: another model than the config asks for, past max_iters, trained on other data."""
    if not os.path.exists(path):
        raise ConfigError(f"init_from=resume but {path} does not exist")
    ckpt, saved = load_checkpoint(path)
    if c.eval_only and gptconf.ega_norm != saved.ega_norm and 'ega_norm' in attn_options(saved.attn):
        # the same weights under other statistics (docs/variants.md §2): the published EGA evaluated
        # as it can run, causally, with prefix statistics; the run's audit judges the form evaluated
        saved = replace(saved, ega_norm=gptconf.ega_norm)
    diff = [f"{k}={getattr(gptconf, k)!r} (checkpoint: {v!r})"
            for k, v in asdict(saved).items() if not same_setting(k, getattr(gptconf, k), v)]
    if diff:
        raise ConfigError(f"the config does not match the checkpoint: {', '.join(diff)}")
    if ckpt['iter_num'] > c.max_iters and not c.eval_only:
        raise ConfigError(f"{path} is at iter {ckpt['iter_num']}, past max_iters={c.max_iters}: "
                          f"resume with --max_iters above {ckpt['iter_num']} to train on")
    was = ckpt.get('data', {}).get('sha256')
    if was and was != meta['sha256'] and not c.resume_other_data:
        raise ConfigError(f"{path} was trained on other data than {data_dir} holds now (sha256 "
                          f"{was[:12]}, now {meta['sha256'][:12]}): point --data_dir at its data, or pass "
                          f"--resume_other_data=True to train on this")
    return ckpt, saved


def likely_mistakes(c):
    """One-line warnings for a config that runs but surely not as meant: options the variant does not
    read (unread_options), a path the variant cannot take."""
    out = unread_options(c)
    maps = [n for n in components(c.attn) if ATTN[n].slot == 'logits']
    if c.attn_impl == 'sdpa' and maps:
        out.append(f"attn_impl=sdpa: {maps[0]}'s logit map has no SDPA form; the attention runs the plain path "
                   f"(attend_plain), as attn_impl=auto would")
    return out


PAPER_EVAL = (50, 64, 256)      # the papers' evaluation: 50 batches of 64 windows of 256 tokens (train.py's)


def eval_repeats(data, c):
    """A line where the fixed eval windows outnumber the val split's tokens: each eval then reads the same
    text several times over ('warning: ...'; 'note: ...' for the papers' own evaluation, where it is
    expected), or None."""
    times = c.eval_iters * c.batch_size * c.block_size / max(1, len(data['val']))
    if times <= 2:
        return None
    text = (f"each eval reads {c.eval_iters} x {c.batch_size} windows of {c.block_size} tokens from a val split "
            f"of {len(data['val']):,}: about {times:.0f} times over")
    if (c.eval_iters, c.batch_size, c.block_size) == PAPER_EVAL:
        return f"note: {text}, as the papers' evaluation does (expected: the windows are fixed, alike for every run)"
    return f"warning: {text} (lower --batch_size or --eval_iters)"


def run_cli(train, argv, defaults, choices):
    """train.py's command line: the config checked, then train run. Returns the exit code: 0, 1 (a
    training error), 2 (a config error), 128 + a signal."""
    try:
        cfg = load_config(defaults, argv, choices)
        for k in ('out_dir', 'data_dir'):     # '--out_dir=~/x': no shell expands a ~ after '='
            if isinstance(cfg.get(k), str):
                cfg[k] = os.path.expanduser(cfg[k])
        check_run(SimpleNamespace(**cfg))
        if os.environ.get('RANK', '0') == '0':              # once: rank 0 alone warns
            for w in likely_mistakes(SimpleNamespace(**cfg)):
                print(f"warning: {w}", file=sys.stderr)
        summary = train(cfg, [a for a in argv if not a.startswith('--')])
    except ConfigError as e:
        return fail(e)
    except TrainError as e:
        return fail(e, 1)
    except Interrupted as e:
        return fail(e, 128 + e.signum)
    except KeyboardInterrupt:   # Ctrl-C before the handlers are in place
        return fail('interrupted while starting', 128 + signal.SIGINT)
    finally:
        if torch.distributed.is_initialized():
            gc.collect()    # DDP sits in reference cycles: freed at exit, after gloo, it aborts (1 run in ~10)
            torch.distributed.destroy_process_group()
    return 128 + summary['signal'] if summary['signal'] else 0


def git_commit(cwd=HERE, results=os.path.join(HERE, 'results')):
    """The code's version, which a run's log opens with: '<commit>' or '<commit>+dirty' of the tree at cwd, the
    results folder left out (results do not make the tree dirty); 'unknown' where git cannot tell. The diff of
    a dirty tree is the lab's record (lab/provenance.py)."""
    inside = os.path.relpath(results, cwd)
    skip = [] if inside.startswith('..') else [f':(exclude){inside}']
    try:
        run = [subprocess.run(['git', *args], cwd=cwd, capture_output=True, text=True, timeout=120).stdout.strip()
               for args in (['rev-parse', '--short', 'HEAD'], ['status', '--porcelain', '--', '.', *skip])]
    except (OSError, subprocess.SubprocessError):
        return 'unknown'
    return (run[0] or 'unknown') + ('+dirty' if run[1] else '')


def versions():
    """'python 3.12.3, torch 2.11.0+cu130, CUDA 13.0, NVIDIA H200' (the GPU where CUDA is at hand): what a
    run's log opens with and its run.json records, for its replays."""
    import platform
    out = f"python {platform.python_version()}, torch {torch.__version__}"
    if torch.cuda.is_available():
        out += f", CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}"
    return out
