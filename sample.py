"""
Sample from a trained checkpoint.

    python sample.py --out_dir=out-ega_mope-cpu
    python sample.py --out_dir=out-ega_mope-cpu --start="ROMEO:" --num_samples=2 --max_new_tokens=300
    python sample.py --out_dir=out --start=FILE:prompt.txt --temperature=0.8 --top_k=200

Decoding follows what the checkpoint recorded: characters through the run's
meta.json, or GPT-2 BPE through tiktoken. What it loads is data, never code: the
checkpoint with torch.load(weights_only=True), the vocabulary as JSON. A checkpoint
whose audit found a leak gets a warning: such a model was trained seeing the future, and its samples mean
nothing.
"""

import math
import os
import sys
from types import SimpleNamespace

import torch

from configurator import ConfigError, describe, fail, load_config
from model import ATTN, GPT, attn_options, components
from prepare import META as _META, PrepareError, gpt2_encoding, read_meta  # _: no config key
from runtime import check_device, file_digest, load_checkpoint, load_weights, resolve_device
from train import autocast

# -----------------------------------------------------------------------------
out_dir = 'out'                 # the run's folder, holding ckpt.pt
start = '\n'                    # prompt text, or FILE:path to read it from a file
num_samples = 3
max_new_tokens = 500
temperature = 0.8               # 0 is greedy; above 1 is more random
top_k = 200                     # keep the top_k most likely tokens; 0 keeps all
seed = 1337
meta_path = ''                  # char vocabulary; default: the meta.json of the run's data_dir
device = 'auto'
dtype = 'auto'
compile = False
# -----------------------------------------------------------------------------
_MAX_PROMPT = 2 ** 20           # bytes of a FILE: prompt ('_': no config key)
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith('_') and isinstance(v, (bool, int, float, str))}
CHOICES = {'dtype': ('auto', 'float32', 'bfloat16', 'float16')}


def load_tokenizer(ck, meta_path):
    """encode, decode for what the checkpoint was trained on."""
    info = ck.get('data', {})
    if info.get('tokenizer', 'char') == 'gpt2':
        try:
            enc = gpt2_encoding()
        except PrepareError as e:
            raise ConfigError(f"GPT-2 decoding: {e}") from None
        return (lambda s: enc.encode(s, allowed_special={'<|endoftext|>'})), enc.decode, enc.n_vocab
    path = meta_path or os.path.join(info.get('data_dir', ''), _META)
    if not os.path.exists(path) and not os.path.exists(os.path.join(os.path.dirname(path), 'meta.pkl')):
        raise ConfigError(f"char vocabulary {path} not found: point meta_path at the run's {_META}")
    try:
        meta = read_meta(path)
    except PrepareError as e:
        raise ConfigError(f"{e} (or point meta_path at the {_META} of the run's char data)") from None
    same_size = meta['vocab_size'] == info.get('vocab_size')          # else the size's own error, below
    if same_size and info.get('meta_sha256') and file_digest(path) != info['meta_sha256']:   # a permuted one
        raise ConfigError(f"{path} is not the vocabulary this model was trained with (its sha256 differs from the "
                          f"one the checkpoint records): point meta_path at the {_META} of the run's data")
    if meta['tokenizer'] != 'char':
        raise ConfigError(f"{path} is no char vocabulary (a {meta['tokenizer']} {_META}, which holds no characters): "
                          f"point meta_path at the {_META} of the run's char data")
    stoi, itos, size = meta['stoi'], meta['itos'], meta['vocab_size']

    def encode(s):
        unknown = sorted(set(s) - set(stoi))
        if unknown:
            raise ConfigError(f"the prompt has characters outside the vocabulary: {unknown!r}")
        return [stoi[ch] for ch in s]

    return encode, (lambda ids: ''.join(itos[i] for i in ids)), size


def check_sample(c):
    """The options' values, before the checkpoint is read."""
    if not (math.isfinite(c.temperature) and (c.temperature == 0 or c.temperature >= 1e-6)):
        raise ConfigError(f"need temperature 0 (greedy) or a finite one >= 1e-6 (below, logits / temperature "
                          f"overflow), got {c.temperature}")
    if c.top_k < 0:
        raise ConfigError(f"need top_k >= 0 (0 keeps every token), got {c.top_k}")
    if c.num_samples < 1:
        raise ConfigError(f"need num_samples >= 1, got {c.num_samples}")
    if c.max_new_tokens < 0:
        raise ConfigError(f"need max_new_tokens >= 0, got {c.max_new_tokens}")
    check_device(c.device)
    name = c.start[5:] if c.start.startswith('FILE:') else None
    if name is not None and (not os.path.isfile(name) or os.path.getsize(name) > _MAX_PROMPT):
        raise ConfigError(f"the prompt file {name} is not a regular file of at most {_MAX_PROMPT:,} bytes "
                          f"(the model sees its last block_size tokens)")


def sample(cfg):
    c = SimpleNamespace(**cfg)
    check_sample(c)
    ckpt_path = os.path.join(os.path.expanduser(c.out_dir), 'ckpt.pt')
    if not os.path.isfile(ckpt_path):
        raise ConfigError(f"no checkpoint at {ckpt_path}" + (" (it is not a regular file)" if os.path.exists(ckpt_path)
                          else '') + ": train first, or set out_dir")
    ck, gptconf = load_checkpoint(ckpt_path, keys=('model', 'model_args'))
    audit = ck.get('audit', {})
    if not audit.get('causal', False):
        print(f"warning: this model LEAKS (audit: future tokens move its logits by "
              f"{audit.get('max_change', float('nan')):.1e}): it was trained seeing the future, "
              f"so its samples mean nothing", file=sys.stderr)
    if 'ega_norm' in attn_options(gptconf.attn):     # which statistics the gate samples with, always said
        print(f"note: attn={gptconf.attn} samples with ega_norm={gptconf.ega_norm}" + (
            ": the published statistics over the whole window. While it generates, the window is the tokens so "
            "far, so no future is seen, but each step's statistics are not those it was trained and evaluated "
            f"with: its windowed val loss is not what it delivers, and what it delivers is its generation loss (each "
            f"token scored from the tokens before it alone, as here: python -m lab.generation --out_dir={c.out_dir})"
            if gptconf.ega_norm == 'window' else
            " (prefix: causal running statistics)" if gptconf.ega_norm == 'prefix' else ''), file=sys.stderr)
    for why in (ATTN[n].edge for n in components(gptconf.attn) if ATTN[n].edge):   # causal, but not as evaluated
        print(f"note: attn={gptconf.attn}: {why}; its windowed val loss is not what it delivers (python -m "
              f"lab.generation --out_dir={c.out_dir} scores it as it generates)", file=sys.stderr)
    it, planned = ck.get('iter_num'), ck.get('config', {}).get('max_iters')
    if it == 0:
        print("warning: this checkpoint is at iter 0 (saved by the first eval, before any step): its samples "
              "are an untrained model's noise", file=sys.stderr)
    elif it is not None and planned and it < planned:     # a run stopped (Ctrl-C, a signal) before its end
        print(f"warning: this checkpoint is at iter {it} of its run's {planned} (stopped early): its samples "
              f"are a partly trained model's (--init_from=resume in train.py trains on)", file=sys.stderr)
    encode, decode, vocab = load_tokenizer(ck, c.meta_path)
    if vocab != gptconf.vocab_size:
        raise ConfigError(f"vocabulary mismatch: the tokenizer has {vocab} tokens, "
                          f"the checkpoint's model {gptconf.vocab_size}")
    prompt = c.start
    if prompt.startswith('FILE:'):
        name = prompt[5:]
        try:
            with open(name, encoding='utf-8') as f:
                prompt = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read the prompt file {name}: {e}") from None
    ids = encode(prompt)
    if not ids:
        raise ConfigError("the prompt is empty: give at least one character with --start")
    dev = resolve_device(c.device)
    _, ctx = autocast(dev.split(':')[0], c.dtype)
    torch.manual_seed(c.seed)
    model = GPT(gptconf)
    load_weights(model, ck['model'], ckpt_path)
    model.eval().to(dev)
    if c.compile:
        model = torch.compile(model)
    x = torch.tensor(ids, dtype=torch.long, device=dev)[None, :]
    out = []
    with torch.no_grad(), ctx:
        for _ in range(c.num_samples):
            y = model.generate(x, c.max_new_tokens, temperature=c.temperature, top_k=c.top_k or None)
            out.append(decode(y[0].tolist()))
    return out


def main(argv):
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS, CHOICES))
        return 0
    try:
        texts = sample(load_config(DEFAULTS, argv, CHOICES))
    except ConfigError as e:
        return fail(e)
    for t in texts:
        print(t)
        print('---------------')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
