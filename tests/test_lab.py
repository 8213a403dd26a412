"""The layout: the repository's root is the reference a nanoGPT reader expects (at most 8 Python
files, none importing lab/), and the research tooling is one package, lab/, by concern: no module
over 400 lines, no import cycle among its modules, and every module that is a command has its
`__main__` block and a --help that exits 0 (python -m lab.X --help)."""

import ast
import contextlib
import io
import re
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ROOT = {'model.py', 'train.py', 'runtime.py', 'sample.py', 'prepare.py', 'configurator.py', 'bench.py', 'causality.py'}
LAB = sorted(p for p in (REPO / 'lab').glob('*.py'))
MAX_LINES = 400


def tree(path):
    return ast.parse(path.read_text(), str(path))


def imported(path):
    """The modules a file imports, anywhere in it (inside functions too), as dotted names."""
    out = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out |= {f'{node.module}.{a.name}' for a in node.names}     # from lab import paths: lab.paths
    return out


def lab_graph():
    """{module: the lab modules it imports} over lab/*.py."""
    names = {p.stem for p in LAB}
    return {p.stem: sorted({m.split('.')[1] for m in imported(p) if m.startswith('lab.') and m.split('.')[1] in names}
                           - {p.stem}) for p in LAB}


def has_main(path):
    return any(isinstance(n, ast.FunctionDef) and n.name == 'main' for n in tree(path).body)


def main_block(path):
    """Whether the module ends in `if __name__ == '__main__':` at its top level."""
    for n in tree(path).body:
        if isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name) \
                and n.test.left.id == '__name__' and [getattr(c, 'value', None) for c in n.test.comparators] == \
                ['__main__']:
            return True
    return False


COMMANDS = [p.stem for p in LAB if has_main(p)]


def test_the_root_holds_at_most_the_eight_reference_files():
    py = {p.name for p in REPO.glob('*.py')}
    assert len(py) <= 8 and py <= ROOT, sorted(py - ROOT)


def code_lines(path):
    """Lines holding code: any token but comments, strings standing alone (docstrings) and layout."""
    import tokenize
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER,
            tokenize.STRING}
    with open(path) as f:
        return {n for t in tokenize.generate_tokens(f.readline) if t.type not in skip
                for n in range(t.start[0], t.end[0] + 1)}


def test_model_py_opens_with_the_gpt_and_stays_small():
    """A reader finds the GPT on the first screens: its classes end before line 550, and model.py holds at
    most 1,100 lines of code and 1,500 in all (every variant included; the maths lives in docs/variants.md),
    which leaves room for a hacker's variants (the README's recipe) and for comments and blank lines.
    README.md stays short: at most 175 lines besides its generated tables."""
    path = REPO / 'model.py'
    ends = {n.name: n.end_lineno for n in tree(path).body if isinstance(n, ast.ClassDef)}
    assert max(ends[c] for c in ('GPTConfig', 'CausalSelfAttention', 'MLP', 'Block', 'GPT')) < 550, ends
    assert len(code_lines(path)) <= 1100
    assert len(path.read_text().splitlines()) <= 1500
    # README's own text, its generated tables (one row a variant, one a claim) aside: they grow with the
    # registry and the ledger, and a hacker's new variant must not push the README past a cap
    body = re.sub(r'(<!-- (\w+): .*?-->\n)(.*?)(<!-- /\2 -->)', r'\1\4', (REPO / 'README.md').read_text(), flags=re.S)
    assert len(body.splitlines()) <= 175


def test_no_root_module_imports_lab():
    for name in sorted(ROOT):
        path = REPO / name
        if path.exists():
            assert not {m for m in imported(path) if m == 'lab' or m.startswith('lab.')}, name


# The root API the lab uses, by module: every root name lab/ reaches (`from model import X`, `model.X`).
# A new name is a decision (does the root owe it to its own readers, or is it the lab's to keep?): add it
# here, or move it; a name the lab stops using goes too, so that the list stays the API it is.
LAB_API = {
    'bench': {'flops_per_token', 'mfu_peak', 'saved_bytes', 'variant_config'},
    'causality': {'audit', 'generation_logits', 'influence', 'learned'},
    'configurator': {'ConfigError', 'describe', 'fail', 'load_config'},
    'model': {'ATTN', 'EnergyGate', 'GPT', 'GPTConfig', 'IMPLS', 'MOPE', 'POS', 'SLOTS', 'attn_options', 'flex_refusal',
              'components', 'real_dtype', 'sin_freqs', 'waves'},
    'prepare': {'META', 'PrepareError', 'read_meta', 'write_atomic'},
    'runtime': {'COMPILE_MODES', 'OLD_CHECKPOINT_NAMES', 'TrainError', 'check_checkpoint', 'check_device', 'check_run',
                'find_data_dir', 'git_commit', 'load_checkpoint', 'load_data', 'nearest_existing',
                'load_weights', 'resolve_device', 'versions'},
    'train': {'CHOICES', 'DEFAULTS', 'EVAL_SEED', 'LEAK_MARK', 'autocast', 'estimate_losses',
              'eval_row', 'eval_set', 'eval_windows', 'fmt_time', 'forward_backward', 'get_batch', 'get_lr',
              'grad_clip', 'log', 'model_config', 'setup', 'update', 'windows'},
}
# root names that no root module uses, whose only callers (tests aside) are in lab/, each with why the
# root keeps it
LAB_ONLY = {
    ('causality', 'influence'): "the audit's influence map (docs/variants.md §5): the root's audit, drawn by lab",
}


def root_names_used_by_lab():
    """{root module: the names lab/ reaches in it}, read from the lab's syntax trees."""
    modules = {n[:-3] for n in ROOT}
    out = {}
    for path in LAB:
        alias, t = {}, tree(path)
        for node in ast.walk(t):            # the imports first: an import inside a function counts too
            if isinstance(node, ast.Import):
                alias.update({a.asname or a.name: a.name for a in node.names if a.name in modules})
            elif isinstance(node, ast.ImportFrom) and node.module in modules and not node.level:
                out.setdefault(node.module, set()).update(a.name for a in node.names)
        for node in ast.walk(t):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in alias:
                out.setdefault(alias[node.value.id], set()).add(node.attr)
    return out


def names_in(path):
    """Every identifier a file's code reads (names, attributes, imported names; not what it assigns)."""
    out = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add(node.name.split('.')[-1])
    return out


def test_the_lab_uses_the_root_through_its_declared_api():
    assert root_names_used_by_lab() == LAB_API


def test_no_root_name_is_there_for_the_lab_alone():
    """A top-level name of a root module that no root module reads, while lab/ does, is code the root
    carries for the lab: it moves to lab/, or LAB_ONLY says why the root keeps it. A decorated class
    (a registered variant) is read by the registry."""
    root_reads = set().union(*(names_in(REPO / n) for n in ROOT))
    lab_reads = root_names_used_by_lab()
    found = set()
    for name in ROOT:
        for node in tree(REPO / name).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.decorator_list:
                defined = [node.name]
            elif isinstance(node, ast.Assign):
                defined = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            found |= {(name[:-3], d) for d in defined if d not in root_reads and d in lab_reads.get(name[:-3], ())}
    assert found == set(LAB_ONLY), found


def test_no_root_name_is_given_twice():
    """One name, one idea: no function or class is defined at the top level of two root modules (the
    scripts' `main` aside), so that a reader who greps for a name finds the one it is."""
    where = {}
    for name in sorted(ROOT):
        for node in tree(REPO / name).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name != 'main':
                where.setdefault(node.name, []).append(name)
    assert not {k: v for k, v in where.items() if len(v) > 1}


def test_no_lab_module_is_over_400_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in LAB}
    assert not {k: n for k, n in sizes.items() if n > MAX_LINES}, sizes


def test_no_import_cycle_among_the_lab_modules():
    g = lab_graph()
    assert g['study'] and g['ledger'], g          # the graph sees `from lab import x` and `from lab.x import y`
    done, path = set(), []

    def visit(m):
        if m in path:
            pytest.fail('import cycle: ' + ' -> '.join(path[path.index(m):] + [m]))
        if m in done:
            return
        path.append(m)
        for d in g[m]:
            visit(d)
        path.pop()
        done.add(m)
    for m in g:
        visit(m)


def test_the_commands_are_as_documented():
    assert {'study', 'status', 'ledger', 'replay', 'longctx', 'emd', 'gpu_study', 'authors', 'influence', 'phase',
            'corpus', 'precision'} <= set(COMMANDS), COMMANDS


@pytest.mark.parametrize('name', COMMANDS)
def test_every_command_has_a_main_block_and_its_help_exits_0(name, monkeypatch):
    """`python -m lab.X --help`, in this process (runpy runs the module as __main__, as -m does): the
    docstring and the keys on stdout, exit 0."""
    assert main_block(REPO / 'lab' / f'{name}.py'), f"lab/{name}.py has a main() but no `if __name__ == '__main__'`"
    monkeypatch.setattr(sys, 'argv', [f'lab/{name}.py', '--help'])
    out = io.StringIO()
    with pytest.raises(SystemExit) as e, contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)     # 'found in sys.modules': imported by another test
        runpy.run_module(f'lab.{name}', run_name='__main__', alter_sys=True)
    assert e.value.code in (0, None) and 'keys and defaults:\n  --' in out.getvalue(), out.getvalue()[-300:]
    assert str(REPO) not in out.getvalue(), "a default names this clone's absolute path: make it relative"


@pytest.mark.slow
@pytest.mark.parametrize('name', COMMANDS)
def test_every_command_runs_by_path_too(name):
    """`python lab/X.py --help` as well as `python -m lab.X --help`: run by path, a module puts the
    repository's root on sys.path itself (they once stopped at their first import, a traceback)."""
    p = subprocess.run([sys.executable, f'lab/{name}.py', '--help'], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and 'Traceback' not in p.stderr and 'keys and defaults:' in p.stdout, p.stderr[-500:]


def test_every_command_module_puts_the_root_on_the_path_when_run_by_path():
    """The fast half of the test above: the guard sits before the module's first import of the repository."""
    for name in COMMANDS:
        text = (REPO / 'lab' / f'{name}.py').read_text()
        guard = text.find("if not __package__:")
        first = min(i for i in (text.find('\nfrom lab'), text.find('\nimport model'), text.find('\nfrom configurator'),
                                text.find('\nimport runtime'), text.find('\nimport train')) if i >= 0)
        assert 0 <= guard < first, name


@pytest.mark.parametrize('name', ['study', 'replay'])
def test_help_as_a_process(name):
    p = subprocess.run([sys.executable, '-m', f'lab.{name}', '--help'], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stderr == '' and 'keys and defaults:' in p.stdout, p.stderr


def test_the_gate_mechanism_row_counts_heads_against_a_fresh_init(tmp_path, monkeypatch):
    """Row 42 (lab/gates.py): Spearman's rho with ties averaged; a head goes the claimed way if it lifts
    boundaries (rho >= RHO) or suppresses frequent keys (rho <= -RHO), the other way if the opposite; the
    verdict compares the trained gate's count with a fresh init's and with the heads going the other way."""
    import json
    import numpy as np
    from lab import gates, paths
    assert list(gates.ranks(np.array([3.0, 1.0, 2.0, 2.0]))) == [3.0, 0.0, 1.5, 1.5]
    x = np.arange(50.0)
    assert gates.spearman(x, x ** 3) == pytest.approx(1.0) and gates.spearman(x, -x) == pytest.approx(-1.0)
    assert gates.spearman(x, np.ones(50)) == 0.0

    def heads(boundary=0, rare=0, against=0, n=8):
        kinds = ['b'] * boundary + ['r'] * rare + ['a'] * against + ['-'] * (n - boundary - rare - against)
        return {f'0.{h}': dict(rho_freq={'r': -0.5, 'a': 0.5}.get(k, 0.1), rho_boundary=0.6 if k == 'b' else -0.1)
                for h, k in enumerate(kinds)}
    assert gates.tracking(heads(2, 1, 3)) == (3, 2, 1, 3)
    assert gates.tracking({'0.0': dict(rho_freq=0.0, rho_boundary=-0.4)}) == (0, 0, 0, 1)   # boundaries pushed down
    monkeypatch.setattr(paths, 'RESULTS', str(tmp_path))
    assert gates.row_gate_mechanism(None, None, None)[1] == 'untestable here'
    (tmp_path / 'gates').mkdir()
    for trained, init, want in [(heads(3, 1), heads(1), 'reproduced'), (heads(0, 2), heads(2), 'contradicted'),
                                (heads(2, 0, 3), heads(1), 'not resolved'), (heads(1, 0, 0), heads(0, 0, 5), 'reproduced')]:
        run = dict(iter=2000, keys=100, trained=trained, untrained=init, suppressed={'e': -1}, lifted={'Q': 0})
        (tmp_path / 'gates' / 'mechanism.json').write_text(json.dumps(dict(command='python -m lab.gates',
                                                                           runs={'r-s1': run})))
        text, verdict = gates.row_gate_mechanism(None, None, None)
        assert verdict == want and f'{gates.tracking(trained)[0]} of 8 heads go the claimed way' in text


def test_the_gate_analysis_never_replaces_its_results_with_less():
    """lab.gates refuses to overwrite mechanism.json with fewer runs or fewer val keys per head."""
    from lab import gates
    old = {'runs': {'a-s1': {'keys': 3840}, 'b-s2': {'keys': 960}}}
    assert gates.less(old, {'a-s1': {'keys': 3840}, 'b-s2': {'keys': 960}}) == ''
    assert gates.less(old, {'a-s1': {'keys': 7680}, 'b-s2': {'keys': 960}, 'c-s3': {'keys': 1}}) == ''
    assert 'holds a-s1 over 3,840 val keys per head; this would hold 960' in \
        gates.less(old, {'a-s1': {'keys': 960}, 'b-s2': {'keys': 960}})
    assert 'holds b-s2 over 960' in gates.less(old, {'a-s1': {'keys': 3840}})
    assert gates.less({}, {'a-s1': {'keys': 1}}) == ''


def test_the_gate_logits_are_what_the_attention_adds():
    """lab/gates.py reads each layer's EGA key logit as the gate returns it to the attention."""
    import torch
    import model
    from lab import gates
    torch.manual_seed(0)
    m = model.GPT(model.GPTConfig(attn='ega', n_layer=2, n_head=2, n_embd=16, block_size=16, vocab_size=11,
                                  dropout=0.0)).eval()
    idx = torch.randint(11, (3, 16))
    g = gates.gate_logits(m, idx)
    assert g.shape == (2, 3, 2, 16)
    with torch.no_grad():
        x = m.transformer.h[1].ln_1(m.transformer.h[0](m.transformer.drop(m.transformer.wte(idx) +
                                                                         m.transformer.pos(16)[0])))
        want = m.transformer.h[1].attn.gates['ega'](x, torch.zeros(3, 2, 16, 8), 0.0)[1]
    assert (torch.from_numpy(g[1]) - want.double()).abs().max().item() < 1e-6
