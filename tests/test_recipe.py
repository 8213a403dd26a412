"""README's "Adding a variant", followed to the letter in a copy of the repository: its SoftCap example
(the code block, read from README.md) goes into model.py, its verdict into EXPECTED_ATTN, a config file
and a docs line are added, the README's variants table is regenerated with the command the suite names (no
table of the lab's changes), and then the tests that read the registry run in the copy and pass, the new
variant in them.
A hacker's first variant must not end in a red suite that blames them."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# the test files whose lists come from the registry (every form, composition, name, config, table)
REGISTRY_TESTS = ['tests/test_model.py', 'tests/test_registry.py', 'tests/test_precision.py', 'tests/test_lab.py',
                  'tests/test_bench.py', 'tests/test_train.py', 'tests/test_ablations.py']


def recipe_code():
    """The indented code block of README's step 2, dedented."""
    text = (REPO / 'README.md').read_text()
    section = text[text.index('## Adding a variant'):]
    block = re.search(r'registered where it is defined:\n\n((?:(?: {7}.*)?\n)+)', section).group(1)
    return textwrap.dedent(block).strip() + '\n'


def copy_repository(dest):
    files = subprocess.run(['git', 'ls-files'], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in files.splitlines():
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def test_the_recipe_code_is_the_softcap_example():
    code = recipe_code()
    assert code.startswith("@register(ATTN, 'softcap'") and 'class SoftCap(nn.Module):' in code
    compile(code, 'README.md', 'exec')


@pytest.mark.slow
def test_following_the_recipe_leaves_the_suite_green(tmp_path, sources):
    repo = tmp_path / 'repo'
    copy_repository(repo)
    # the copy's suite whole: a shard of .ci/run's (SPECTRAL_TEST_SHARD) would keep half of its tests
    env = {**{k: v for k, v in os.environ.items() if k != 'SPECTRAL_TEST_SHARD'}, 'PYTHONDONTWRITEBYTECODE': '1'}
    if sources.download:        # the copy has no data beside it: lend it the corpus the suite uses
        (repo / 'data' / 'shakespeare_char').mkdir(parents=True)
        shutil.copy2(sources.corpus, repo / 'data' / 'shakespeare_char' / 'input.txt')
        env['SPECTRAL_TEST_DATA'] = ''
    else:
        env['SPECTRAL_TEST_DATA'] = str(sources.corpus.parent.parent)
    # step 1: the maths in docs/variants.md; step 2: the part in model.py, in the logit maps' family
    with open(repo / 'docs' / 'variants.md', 'a') as f:
        f.write('\n### `softcap`: soft-capped logits\n\n`30 tanh(s / 30)` of the scaled scores (README\'s '
                'recipe). Causal: it maps each logit alone.\n')
    src = (repo / 'model.py').read_text()
    at = src.index('@register(ATTN, \'scale_init\'')
    (repo / 'model.py').write_text(src[:at] + recipe_code() + '\n' + src[at:])
    # step 3: its verdict, a config file, the generated tables
    tm = (repo / 'tests' / 'test_model.py').read_text()
    (repo / 'tests' / 'test_model.py').write_text(tm.replace("EXPECTED_ATTN = {\n", "EXPECTED_ATTN = {\n    'softcap': C,\n", 1))
    (repo / 'config' / 'softcap.py').write_text("# README's recipe: soft-capped logits\nattn = 'softcap'\n"
                                                "out_dir = 'out-softcap'\n")
    for cmd in (['-m', 'lab.readme', '--write=True'], ['causality.py', '--attn=softcap']):   # and the audit
        r = subprocess.run([sys.executable, *cmd], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (cmd, r.stdout[-1500:], r.stderr[-1500:])
    assert r.stdout.startswith('causal ('), r.stdout                         # the audit's verdict
    # step 4: the tests that read the registry, the variant among them: each test of the variant (its name in
    # the test's id: alone, in compositions, its config) and each that reads the whole registry at once (no
    # parameters); the others, of other variants, are the suite's own and pass there
    listed = subprocess.run([sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider',
                             *REGISTRY_TESTS], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    ids = [t for t in listed.stdout.splitlines() if '::' in t]
    mine = [t for t in ids if 'softcap' in t]
    assert len(mine) >= 10, listed.stdout[-1500:]
    r = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:cacheprovider',
                        *mine, *(t for t in ids if '[' not in t)],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def just_try_it():
    """README's "Just try it": (the line of model.py it names, the line that replaces it, its command)."""
    text = (REPO / 'README.md').read_text()
    section = text[text.index('## Just try it'):text.index('## Adding a variant')]
    old = re.search(r'model\.py,\n?`([^`]+)`', section).group(1)
    new = re.search(r'\n\n {4}(\S.*?)\s{2,}#', section).group(1)
    cmd = re.search(r'`(python train\.py [^`]+)`', section).group(1)
    return old, new, cmd


def test_the_just_try_it_edit_is_one_line_and_reaches_the_models_it_names(tmp_path):
    """The edit, applied literally to a copy of model.py, changes one line; the edited gate trains and audits
    causal; it reaches `ega` and `ega_fox` (and the published form's statistics), and not a filter-bank gate."""
    old, new, cmd = just_try_it()
    src = (REPO / 'model.py').read_text()
    assert src.count(old) == 1, old
    (tmp_path / 'model.py').write_text(src.replace(old, new))
    probe = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(tmp_path)!r}); sys.path.insert(1, {str(REPO)!r})
        import model, causality
        assert model.__file__.startswith({str(tmp_path)!r})
        def gates(attn, **kw):
            torch.manual_seed(0)
            m = model.GPT(model.GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, attn=attn, **kw))
            return sum(isinstance(g, model.EnergyGate) for b in m.transformer.h for g in b.attn.gates.values())
        print(gates('ega'), gates('ega_fox'), gates('ega', ega_norm='window'), gates('ega_morlet'))
        print(causality.audit(model.GPTConfig(attn='ega')).causal, (model.EnergyGate.squash(torch.tensor([1., -2.])) + 0.0).tolist())
    """)
    r = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    reach, audit = r.stdout.splitlines()
    assert reach == '1 1 1 0' and audit == 'True [0.0, -2.0]', r.stdout
    assert cmd.startswith('python train.py config/cpu.py --attn=ega --max_iters=200') and '--out_dir=' in cmd


@pytest.mark.slow
def test_the_just_try_it_command_runs_as_written_with_the_edit(tmp_path, data_dir):
    """In a copy of the repository with the edit applied, README's command trains to its end."""
    old, new, cmd = just_try_it()
    repo = tmp_path / 'repo'
    copy_repository(repo)
    (repo / 'model.py').write_text((repo / 'model.py').read_text().replace(old, new))
    args = cmd.split()[1:] + [f'--data_dir={data_dir}']
    r = subprocess.run([sys.executable, *args], cwd=repo, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0 and 'done: best val' in r.stdout and 'audit causal' in r.stdout, r.stderr[-2000:]
