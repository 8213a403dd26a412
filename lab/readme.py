"""
README's variants table, generated from the registry (model.ATTN, model.POS): a name, the slot
it fills, the class of model.py that fills it (a composition: its parts'), what it is (the class's
docstring, cut at a word where the row would pass WIDTH characters), its declared verdict and its
section of docs/variants.md. A new registered variant is in it. Its options are in `python train.py --help`, its configs in config/.

    python -m lab.readme               # print the table
    python -m lab.readme --write=True  # write it into README.md, and EGA's path (path())
"""

import inspect
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


def part(reg, name):
    """The class of model.py that a variant is (dot: none, attend_plain alone; a composition: its
    parts' classes)."""
    v = reg[name]
    if v.of:
        return '+'.join(part(reg, n) for n in v.of)
    return f'`{v.part.__name__}`' if v.part is not None else '-'


def table():
    rows = ['| name | slot | class | what it is | verdict | § |', '|---|---|---|---|---|---|']
    for kind, reg, slots in (('attn', model.ATTN, model.SLOTS), ('pos', model.POS, {})):
        for name, v in reg.items():
            slot = slots.get(v.slot, v.slot) if not v.of else 'composition: ' + '+'.join(v.of)
            cells = [f'`--{kind}={name}`', slot or '-', part(reg, name), v.doc, verdict(v), f'§{v.docs}']
            row = lambda: '| ' + ' | '.join(c.replace('|', '\\|') for c in cells) + ' |'   # noqa: E731
            while len(row()) > WIDTH:
                cells[3] = cells[3].rstrip(' …').rsplit(' ', 1)[0].rstrip(',;:') + ' …'
            rows.append(row())
    return '\n'.join(rows)


PATH_MARKERS = ('<!-- path: python -m lab.readme --write=True -->', '<!-- /path -->')
# EGA's path from `python train.py config/ega.py` to the logits, in the order a step runs it (eval
# and sampling run it too); each entry's file and line are read from the code, so a test keeps them true
EGA_PATH = [
    ('train.py', 'forward_backward', 'a micro-step under autocast: model(x, y), then its backward'),
    ('model.py', 'GPT.forward', 'token embedding + the table encoding, the blocks, the logits'),
    ('model.py', 'Block.forward', 'x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x))'),
    ('model.py', 'CausalSelfAttention.__init__', "ATTN['ega'].part, EnergyGate, put in self.gates"),
    ('model.py', 'CausalSelfAttention.forward', 'q, k, v; each gate gives a key logit; one attention call'),
    ('model.py', 'EnergyGate.forward', 'the gate: energies, then their key logit'),
    ('model.py', 'gate_signal', 'e_j = w . x_j + b per head, in float32'),
    ('model.py', 'key_logit', 'log sigmoid(alpha (z_j - tau)), the gate as a logit'),
    ('model.py', 'znorm', 'z_j over the prefix j\' <= j (ega), or the whole window (ega_paper: leaks)'),
    ('model.py', 'pick_impl', 'which path computes the attention: attend, attend_flex or attend_plain'),
    ('model.py', 'attend', 'the fused kernel: the key logit rides one more q.k channel'),
    ('model.py', 'attend_plain', 'the formula written out: softmax_j(q_i . k_j scale + log g_j), j <= i'),
]


def path():
    """README's table of EGA's path: each function or method, its file and line, what it does there."""
    import train
    rows = ['| where | what it does |', '|---|---|']
    for file, name, what in EGA_PATH:
        obj = {'train.py': train, 'model.py': model}[file]
        for attr in name.split('.'):           # GPT.forward: a method of a class
            obj = getattr(obj, attr)
        line = inspect.getsourcelines(obj)[1]
        rows.append(f'| `{name}` ({file}:{line}) | {what} |')
    return '\n'.join(rows)


def main(argv):
    defaults = {'write': False}
    c, rc = cli.parse(__doc__, defaults, argv)
    if c is None:
        return rc
    if c['write']:
        readme = os.path.join(paths.REPO, 'README.md')
        try:
            for markers in (MARKERS, PATH_MARKERS):     # both checked before either block is written
                read_block(readme, markers)
        except ConfigError as e:
            return cli.fail(e)
        write_block(readme, MARKERS, table())
        write_block(readme, PATH_MARKERS, path())
        print("wrote the variants table and EGA's path into README.md")
    else:
        print(table())
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
