"""README's "Adding a variant", followed to the letter in a copy of the repository: its SoftCap example
(the code block, read from README.md) goes into model.py, its verdict into EXPECTED_ATTN, a config file
and a docs line are added, the two generated tables are regenerated with the commands the recipe
names, and then the tests that read the registry run in the copy and pass, the new variant in them.
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
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE='1')
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
    for cmd in (['-m', 'lab.readme', '--write=True'], ['-m', 'lab.bench_tables', '--write=True'],
                ['causality.py', '--attn=softcap']):                             # and step 4's audit
        r = subprocess.run([sys.executable, *cmd], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (cmd, r.stdout[-1500:], r.stderr[-1500:])
    assert r.stdout.startswith('causal ('), r.stdout                         # the audit's verdict
    # step 4: the tests that read the registry, the variant among them
    listed = subprocess.run([sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider',
                             *REGISTRY_TESTS], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert sum('softcap' in line for line in listed.stdout.splitlines()) >= 10, listed.stdout[-1500:]
    r = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:cacheprovider', *REGISTRY_TESTS],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
