"""
README's variants table, generated from the registry (model.ATTN, model.POS): a name, the slot
it fills, what it is (its class's docstring), the options it reads, its declared verdict, its
config files and its section of docs/variants.md. A new registered variant is in it.

    python -m lab.readme               # print the table
    python -m lab.readme --write=True  # write it into README.md
"""

import ast
import glob
import os
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import model
from lab import cli, paths
from runtime import write_block

MARKERS = ('<!-- variants: python -m lab.readme --write=True -->', '<!-- /variants -->')


def configs():
    """{('attn' or 'pos', name): [config files that set it]} from config/*.py, read with ast; a
    file that sets a positional encoding beside dot attention shows that encoding, not dot."""
    out = {}
    for path in sorted(glob.glob(os.path.join(paths.REPO, 'config', '*.py'))):
        sets = {n.targets[0].id: n.value.value for n in ast.parse(open(path).read()).body
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id in ('attn', 'pos') and isinstance(n.value, ast.Constant)}
        for kind, name in sets.items():
            if not (kind == 'attn' and name == 'dot' and sets.get('pos', 'learned') != 'learned'):
                out.setdefault((kind, name), []).append(os.path.basename(path))
    return out


def verdict(v):
    """The declared verdict, in words."""
    if v.leaks is True:
        return '**LEAKS**'
    out = 'causal'
    if isinstance(v.leaks, dict):
        out += '; **LEAKS** with ' + ', '.join(f"`{k}={' or '.join(map(str, vals))}`" for k, vals in v.leaks.items())
    if v.leaks_beside:
        out += '; **LEAKS** beside ' + ', '.join(f'`{n}`' for n in v.leaks_beside)
    return out


def options(v):
    return ', '.join(f"`{o}`: {' / '.join(map(str, model.CHOICES[o]))}" if o in model.CHOICES else f'`{o}`'
                     for o in v.options)


def table():
    cfg = configs()
    rows = ['| name | slot | what it is | options | verdict | config | docs |', '|---|---|---|---|---|---|---|']
    for kind, reg, slots in (('attn', model.ATTN, model.SLOTS), ('pos', model.POS, {})):
        for name, v in reg.items():
            slot = slots.get(v.slot, v.slot) if not v.of else 'composition: ' + '+'.join(v.of)
            files = ', '.join(f'`config/{f}`' for f in cfg.get((kind, name), []) if f != 'cpu.py')
            files = 'the default' if name == getattr(model.GPTConfig, kind) and kind == 'pos' else files
            cells = (f'`--{kind}={name}`', slot or '-', v.doc, options(v) or '-', verdict(v), files or '-', f'§{v.docs}')
            rows.append('| ' + ' | '.join(c.replace('|', '\\|') for c in cells) + ' |')
    return '\n'.join(rows)


def main(argv):
    defaults = {'write': False}
    c, rc = cli.parse(__doc__, defaults, argv)
    if c is None:
        return rc
    if c['write']:
        write_block(os.path.join(paths.REPO, 'README.md'), MARKERS, table())
        print('wrote the variants table into README.md')
    else:
        print(table())
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
