"""
A checkpoint of train.py from before 2026-12-05, rewritten so that it loads with torch.load(weights_only=True):

    python -m lab.convert --ckpt=out-ega_mope-cpu/ckpt.pt

Before that date train.py pickled numpy's RNG state as an array, which torch's safe loader refuses (the
root's commands say so and name this command); before 2026-12-01 the attention's tensors also had other
names. The file is read by that same safe loader with exactly numpy's array allowed (runtime.OLD_CHECKPOINT_NAMES:
an array of numbers, rebuilt by numpy, runs no code), so a file from a stranger converts or is refused, and
nothing in it runs. A file that names anything else is refused before it is read. The new checkpoint is built
and checked in memory (it loads with weights_only=True and is a checkpoint of train.py), then written in one
step; a refused file is left byte for byte. One that loads safely already is left as it is.
"""

import io
import os
import re
import shlex
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch

from lab import cli
from model import ATTN, components
from runtime import OLD_CHECKPOINT_NAMES, check_checkpoint, load_checkpoint

# Checkpoints written before the attention's parts were modules of their own name their tensors as the
# attention did then: (old pattern, today's name), '{}' the filter gate's name
OLD_NAMES = ((r'\.attn\.spectral\.', '.attn.qk.'),
             (r'\.attn\.lag_kernel$', '.attn.qk.lag_kernel'),
             (r'\.attn\.lag_weights$', '.attn.logits.lag_weights'),
             (r'\.attn\.energy\.', '.attn.gates.ega.energy.'),
             (r'\.attn\.(alpha|tau)$', r'.attn.gates.ega.\1'),
             (r'\.attn\.forget\.', '.attn.gates.fox.forget.'),
             (r'\.attn\.filter_gate\.', '.attn.gates.{}.'),
             (r'transformer\.pos\.(mope|rel)\.', 'transformer.pos.'))


class ConvertError(Exception):
    pass


def numpy_array_names():
    """The safe loader's allow-list: (object, the name a pickle gives it) for OLD_CHECKPOINT_NAMES alone, and
    the class of a uint32 dtype (the one state numpy sets on a dtype it rebuilds: no name in the file)."""
    core = getattr(np, '_core', None) or np.core                # numpy 2 moved numpy.core to numpy._core
    objects = {'_reconstruct': core.multiarray._reconstruct, 'ndarray': np.ndarray, 'dtype': np.dtype}
    u32 = type(np.dtype(np.uint32))
    return [(objects[name.rsplit('.', 1)[1]], name) for name in OLD_CHECKPOINT_NAMES] + \
        [(u32, f'{u32.__module__}.{u32.__qualname__}')]


def upgrade_names(sd, attn):
    """A state dict of attention attn with today's names, {name: tensor}, in its order, and without
    torch.compile's '_orig_mod.' prefixes."""
    gate = next((n for n in components(attn) if ATTN[n].slot == 'filter_gate'), '')
    out = {}
    for k, v in sd.items():
        k = k.removeprefix('_orig_mod.')
        for old, new in OLD_NAMES:
            k = re.sub(old, new.format(gate), k)
        out[k] = v
    return out


def read_old(path):
    """The old checkpoint, read by the safe loader with numpy's array alone allowed; a ConvertError (nothing
    read) where the file names anything else, or is no checkpoint."""
    try:
        names = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))    # its opcodes: nothing runs
    except Exception as e:
        raise ConvertError(f"not a checkpoint torch.save wrote ({type(e).__name__}: "
                           f"{(str(e).splitlines() or [''])[0]})") from None
    other = sorted(names - set(OLD_CHECKPOINT_NAMES))
    if other:
        raise ConvertError(f"it names {', '.join(other[:4])}{', ...' if len(other) > 4 else ''}, which no "
                           f"checkpoint of train.py holds: refused, not read (it could run code)")
    try:
        with torch.serialization.safe_globals(numpy_array_names()):
            return torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:      # the safe loader refused what the scan could not see: nothing ran
        lines = [x.strip() for x in str(e).splitlines() if x.strip()]
        why = next((x for x in lines if x.startswith('WeightsUnpickler error:')), lines[0] if lines else '')
        raise ConvertError(f"refused by the safe loader, nothing of it ran ({type(e).__name__}: {why[:200]})") \
            from None


def converted(ck, path):
    """The bytes of the checkpoint ck as today's train.py writes it: numpy's key a list of ints, today's
    tensor names; checked by loading them back as load_checkpoint would. A ConvertError where they fail."""
    rng = ck.get('rng') if isinstance(ck, dict) else None
    state = rng.get('numpy') if isinstance(rng, dict) else None
    if isinstance(state, tuple) and len(state) == 5 and isinstance(state[1], np.ndarray):
        if state[1].dtype != np.uint32 or state[1].shape != (624,):
            raise ConvertError(f"its numpy RNG key is {state[1].dtype} {tuple(state[1].shape)}, not numpy's "
                               f"(uint32, 624 words)")
        rng['numpy'] = (state[0], state[1].tolist(), *state[2:])
    try:
        _, cfg = check_checkpoint(ck, path)
    except Exception as e:
        raise ConvertError(str(e)) from None
    if isinstance(ck.get('model'), dict):
        ck['model'] = upgrade_names(ck['model'], cfg.attn)
    buf = io.BytesIO()
    torch.save(ck, buf)
    try:
        check_checkpoint(torch.load(io.BytesIO(buf.getvalue()), map_location='cpu', weights_only=True), path)
    except Exception as e:
        raise ConvertError(f"it would still not load safely ({type(e).__name__}: "
                           f"{(str(e).strip().splitlines() or [''])[0][:200]})") from None
    return buf.getvalue()


def convert(path):
    """Whether path was rewritten (False: it loads safely already), or a ConvertError; path is replaced in one
    step, and only once the new checkpoint is checked."""
    from prepare import write_atomic
    if not os.path.isfile(path):
        raise ConvertError('no such file' if not os.path.exists(path) else 'not a regular file')
    try:
        load_checkpoint(path)
        return False
    except Exception:
        pass
    data = converted(read_old(path), path)
    write_atomic({path: data})
    return True


def main(argv):
    c, rc = cli.parse(__doc__, dict(ckpt=''), argv)
    if c is None:
        return rc
    if not c['ckpt']:
        return cli.fail('name the checkpoint: --ckpt=PATH/ckpt.pt')
    path = os.path.expanduser(c['ckpt'])
    try:
        done = convert(path)
    except (ConvertError, OSError) as e:
        return cli.fail(f"{shlex.quote(path)}: {e}")
    print(f"{'converted' if done else 'left as it is'} {path}: it loads with weights_only=True")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
