"""
README's variants table, generated from the registry (model.ATTN, model.POS): a name, the slot
it fills, what it is (its class's docstring, cut at a word where the row would pass WIDTH
characters), its declared verdict and its section of docs/variants.md. A new registered variant
is in it. Its options are in `python train.py --help`, its configs in config/.

    python -m lab.readme               # print the table
    python -m lab.readme --write=True  # write it into README.md
"""

import os
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import model
from configurator import ConfigError
from lab import cli, paths

# ----------------------------------------------------------------------------- the generated blocks
# of README.md and the files beside it (this table, lab.bench_tables', lab.status's, lab.ledger's,
# lab.replay's): the text between two marker lines


def read_block(path, markers):
    """(the file's text, where its block starts, where it ends): what stands between the two marker
    lines; a ConfigError where the file has no such block."""
    with open(path) as f:
        text = f.read()
    a, b = text.find(markers[0]), text.find(markers[1])
    if a < 0 or b < a:
        raise ConfigError(f"{os.path.basename(path)} has no {markers[0]} ... {markers[1]} block")
    return text, a + len(markers[0]), b


def write_block(path, markers, text):
    """Replace what stands between the two marker lines of a file (README's generated tables) with text."""
    old, a, b = read_block(path, markers)
    with open(path, 'w') as f:
        f.write(old[:a] + '\n' + text + '\n' + old[b:])


MARKERS = ('<!-- variants: python -m lab.readme --write=True -->', '<!-- /variants -->')


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


WIDTH = 160     # a row's most characters: the table reads on a screen


def table():
    rows = ['| name | slot | what it is | verdict | § |', '|---|---|---|---|---|']
    for kind, reg, slots in (('attn', model.ATTN, model.SLOTS), ('pos', model.POS, {})):
        for name, v in reg.items():
            slot = slots.get(v.slot, v.slot) if not v.of else 'composition: ' + '+'.join(v.of)
            cells = [f'`--{kind}={name}`', slot or '-', v.doc, verdict(v), f'§{v.docs}']
            row = lambda: '| ' + ' | '.join(c.replace('|', '\\|') for c in cells) + ' |'   # noqa: E731
            while len(row()) > WIDTH:
                cells[2] = cells[2].rstrip(' …').rsplit(' ', 1)[0].rstrip(',;:') + ' …'
            rows.append(row())
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
