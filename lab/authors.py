"""
Our ega against the authors' own, from a local clone of their code, in one process.

    python -m lab.authors --script=PATH      # float64: our ega (ega_norm=window) against their EGA-1
    python -m lab.authors --script=PATH --bench=True --variants=dot,ega   # their dot and EGA timed beside ours

PATH is the EGA + MOPE paper's training script, `paper2_ega_mope/gpt_phase4_memfix.py`
in a clone of github.com/AthanasiosZeris/energy-gated-attention (not carried here).
The script downloads its data and trains when run, so only its function and class
definitions are executed, beside the names they read (its size constants, set here):
load_authors. With --bench=True every other --key=value is bench.py's (python bench.py
--help): bench.main times their GPT with each of their attention classes (rows
`authors:dot`, `authors:ega`; dropout 0) in the same loop as our variants, and the
lines under its table give each of ours against theirs.
"""

import ast
import builtins
import math
import os
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from lab import bench
import model
from configurator import ConfigError
from lab import cli

SCRIPT = 'paper2_ega_mope/gpt_phase4_memfix.py'
# our variant: their attention class for it (their GPT takes the class, one module per head)
CLASSES = {'dot': 'DotProductAttention', 'ega': 'EGA1Attention'}
NEEDED = ('GPT', *CLASSES.values())


class AuthorsError(Exception):
    """A path that is not their script: a one-line message."""


def load_authors(path, n_embd, n_head, n_layer, block_size, vocab_size, device='cpu'):
    """The definitions of their script (dict: name -> object), at this size, dropout 0: only its function and
    class definitions run, beside the names they read (its size constants, set here); the script itself
    downloads its data and trains when run."""
    try:
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
    except OSError as e:
        raise AuthorsError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise AuthorsError(f"{path} is not Python source (not UTF-8 text: byte 0x{e.object[e.start]:02x} at "
                           f"offset {e.start}): it should be their {SCRIPT}") from None
    except (SyntaxError, ValueError) as e:     # ValueError: null bytes, before Python 3.12
        where = f" (line {e.lineno})" if getattr(e, 'lineno', None) else ''
        raise AuthorsError(f"{path} is not Python: {getattr(e, 'msg', e)}{where}") from None
    tree.body = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    for node in tree.body:                      # what a definition runs when it is made: nothing but lookups
        why = runs_code(node)
        if why:
            raise AuthorsError(f"{path}: {why} (line {why.lineno}) runs code when its definition is made, so it is "
                               f"not loaded: their {SCRIPT} has none") from None
    names = dict(math=math, torch=torch, nn=torch.nn, F=torch.nn.functional, N_EMBED=n_embd, N_HEAD=n_head,
                 N_LAYER=n_layer, BLOCK_SIZE=block_size, DROPOUT=0.0, VOCAB=vocab_size, DEVICE=device)
    try:
        exec(builtins.compile(tree, path, 'exec'), names)
    except Exception as e:                      # a definition that runs code (a decorator, a default)
        raise AuthorsError(f"{path}: its definitions fail to load ({type(e).__name__}: {e}): it should be "
                           f"their {SCRIPT}") from None
    missing = [k for k in NEEDED if k not in names]
    if missing:
        raise AuthorsError(f"{path} defines no {', '.join(missing)}: it should be their {SCRIPT}")
    return names


GRAD_MODES = ('torch.no_grad()', 'torch.inference_mode()', 'torch.enable_grad()')   # the decorators that call


class Why(str):
    lineno = 0


def plain(e):
    """Whether evaluating e calls nothing: a constant, a name, an attribute of one (torch.float32), or tuples,
    lists, sets, dicts, signs and arithmetic of those."""
    if isinstance(e, (ast.Constant, ast.Name)):
        return True
    if isinstance(e, ast.Attribute):
        return plain(e.value)
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        return all(map(plain, e.elts))
    if isinstance(e, ast.Dict):
        return all(plain(x) for x in [*filter(None, e.keys), *e.values])
    if isinstance(e, ast.UnaryOp):
        return plain(e.operand)
    return isinstance(e, ast.BinOp) and plain(e.left) and plain(e.right)


def runs_code(node):
    """Why a definition runs code as it is made (a decorator or a default that calls, a class base or class
    statement that is not a plain definition), or ''. Their methods run later, on our models alone."""
    found = None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        bad = [d for d in [*a.defaults, *filter(None, a.kw_defaults)] if not plain(d)] + \
              [d for d in node.decorator_list if not (plain(d) or ast.unparse(d) in GRAD_MODES)]
        found = bad[0] if bad else None
        what = f"a default or decorator of {node.name}"
    elif isinstance(node, ast.ClassDef):
        bad = [b for b in [*node.bases, *node.decorator_list, *(k.value for k in node.keywords)] if not plain(b)]
        for stmt in node.body:
            inner = runs_code(stmt) if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if inner:
                return inner
            if not (isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Pass)) or
                    isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) or
                    isinstance(stmt, (ast.Assign, ast.AnnAssign)) and (stmt.value is None or plain(stmt.value))):
                bad.append(stmt)
        found = bad[0] if bad else None
        what = f"a statement of class {node.name}"
    if found is None:
        return ''
    why = Why(what)
    why.lineno = found.lineno
    return why


def ega_difference(path, T=24, C=32, nh=4, seed=0):
    """Largest |ours - theirs| of one attention layer's output and its size, in float64: our
    `ega` with the published window statistics, and their EGA1Attention, one module per head,
    with our q, k, v rows, energy, alpha and tau copied into each (weights drawn large, so
    that the gate is far from 1/2), both through our output projection."""
    hs = C // nh
    theirs = load_authors(path, C, nh, 1, T, 11)
    torch.manual_seed(seed)
    cfg = model.GPTConfig(attn='ega', ega_norm='window', n_layer=1, n_head=nh, n_embd=C, block_size=T,
                          vocab_size=11, dropout=0.0, bias=False)
    att = model.GPT(cfg).transformer.h[0].attn.double().eval()
    heads = [theirs['EGA1Attention'](hs).double().eval() for _ in range(nh)]
    gate = att.gates['ega']
    with torch.no_grad():
        for p in att.parameters():
            p.copy_(0.5 * torch.randn_like(p))
        q, k, v = att.c_attn.weight.split(C)                    # (C, C) each, head h in rows h*hs..
        for h, m in enumerate(heads):
            rows = slice(h * hs, (h + 1) * hs)
            m.query.weight.copy_(q[rows]), m.key.weight.copy_(k[rows]), m.value.weight.copy_(v[rows])
            m.proj.weight.copy_(gate.energy.weight[h:h + 1]), m.proj.bias.copy_(gate.energy.bias[h:h + 1])
            m.alpha.copy_(gate.alpha[h:h + 1]), m.tau.copy_(gate.tau[h:h + 1])
        x = torch.randn(3, T, C, dtype=torch.float64)           # (B, T, C)
        ours = att(x)                                           # (B, T, C)
        ref = att.c_proj(torch.cat([m(x) for m in heads], dim=-1))   # (B, T, C)
    return (ours - ref).abs().max().item(), ref.abs().max().item()


def authors_models(path, c):
    """bench.main's extra models: their GPT with each of their attention classes (CLASSES) at the
    bench's size (c, its settled config), each with our variant's GPTConfig (its FLOPs)."""
    try:
        names = load_authors(path, c['n_embd'], c['n_head'], c['n_layer'], c['block_size'],
                             model.GPTConfig.vocab_size, c['device'])
    except AuthorsError as e:
        raise ConfigError(str(e)) from None
    torch.manual_seed(c['seed'])
    return {f'authors:{ours}': (names['GPT'](names[theirs]), bench.variant_config(ours, c))
            for ours, theirs in CLASSES.items()}


def against_theirs(c, runs):
    """Under bench's table: each of our variants against their model of the same attention."""
    for name, r in runs.items():
        theirs = f"authors:{name.split(':')[0]}"
        if theirs in runs and name != theirs:
            print(f"{name} against {theirs}: {r['tps'] / runs[theirs]['tps']:.2f}x the tokens/s")


def main(argv):
    defaults = dict(script='', bench=False)
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, defaults))
        return 0
    own = [a for a in argv if a.split('=')[0] in ('--script', '--bench')]
    try:
        c = cli.load(defaults, own)
        if not c['bench']:
            cli.load(defaults, argv)        # without --bench any other key is a mistake (with it: bench.py's)
        if not c['script']:
            raise ConfigError("name their script: --script=PATH (their paper2_ega_mope/gpt_phase4_memfix.py; "
                              "--help says more)")
        if c['bench']:
            return bench.main([a for a in argv if a not in own], extra=lambda b: authors_models(c['script'], b),
                              after=against_theirs, prog=' '.join(['-m lab.authors', *own]))
        diff, size = ega_difference(c['script'])
    except (ConfigError, AuthorsError) as e:
        return cli.fail(e)
    print(f"ega (ega_norm=window) against their EGA1Attention, float64, T=24 C=32 nh=4: largest difference "
          f"{diff:.1e} on outputs up to {size:.1f}")
    return 0 if diff <= 1e-10 * size else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
