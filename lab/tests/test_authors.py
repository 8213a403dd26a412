"""lab/authors.py: our ega against the authors' own in float64, and their models benched beside ours
(python -m lab.authors --script=PATH --bench=True): moved from tests/test_bench.py, assertions unchanged."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.test_bench import TINY  # noqa: E402


# a stand-in for the authors' training script (not carried here): the names their script
# defines and reads, their EGA-1 as the EGA paper states it (one module per head: a gate
# on z-scores over the window, after the softmax, rows renormalised), and top-level
# statements that must never run (their script downloads data and trains)
AUTHORS_STAND_IN = """
import requests
raise SystemExit('the script body ran')


class DotProductAttention(nn.Module):
    def __init__(self, hs):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(N_EMBED, hs, bias=False) for _ in range(3))

    def weights(self, x):
        s = self.query(x) @ self.key(x).transpose(-2, -1) / math.sqrt(self.key.out_features)
        return s.masked_fill(torch.ones_like(s).triu(1) > 0, float('-inf')).softmax(-1)

    def forward(self, x):
        return self.weights(x) @ self.value(x)


class EGA1Attention(DotProductAttention):
    def __init__(self, hs):
        super().__init__(hs)
        self.proj = nn.Linear(N_EMBED, 1)
        self.alpha, self.tau = nn.Parameter(torch.tensor([2.0])), nn.Parameter(torch.zeros(1))

    def forward(self, x):
        e = self.proj(x).transpose(-2, -1)
        z = (e - e.mean(-1, keepdim=True)) / e.std(-1, keepdim=True, correction=0).clamp(min=1e-8)
        a = self.weights(x) * torch.sigmoid(self.alpha * (z - self.tau))
        return a / a.sum(-1, keepdim=True) @ self.value(x)


class GPT(nn.Module):
    def __init__(self, attn_class):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, N_EMBED)
        self.heads = nn.ModuleList([attn_class(N_EMBED // N_HEAD) for _ in range(N_HEAD)])
        self.out = nn.Linear(N_EMBED, VOCAB)

    def forward(self, idx, targets=None):
        logits = self.out(torch.cat([h(self.emb(idx)) for h in self.heads], -1))
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
"""


@pytest.mark.parametrize('change, code', [(None, 0), (('z - self.tau', 'z + self.tau'), 1),
                                          (('a / a.sum(-1, keepdim=True)', 'a'), 1)])
@pytest.mark.slow
def test_authors_py_checks_our_published_ega_against_theirs_in_float64(tmp_path, change, code):
    path = tmp_path / 'gpt_phase4_memfix.py'
    path.write_text(AUTHORS_STAND_IN.replace(*change) if change else AUTHORS_STAND_IN)
    r = subprocess.run([sys.executable, '-m', 'lab.authors', f'--script={path}'], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == code, r.stdout + r.stderr
    assert 'ega (ega_norm=window) against their EGA1Attention, float64' in r.stdout
    diff = float(r.stdout.split('largest difference ')[1].split()[0])
    assert (diff < 1e-12) == (code == 0)


def beside_theirs(path, *args):
    """bench.py's run with the authors' models beside ours, as lab/authors.py drives it."""
    return subprocess.run([sys.executable, '-m', 'lab.authors', f'--script={path}', '--bench=True', *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_the_authors_models_are_benched_beside_ours_without_running_their_script(tmp_path):
    path = tmp_path / 'gpt_phase4_memfix.py'
    path.write_text(AUTHORS_STAND_IN)
    out = tmp_path / 'b.json'
    r = beside_theirs(path, *TINY, '--variants=dot,ega,ega:none', f'--out={out}')
    assert r.returncode == 0, r.stderr
    rows = [l.split(' | ')[0][2:] for l in r.stdout.splitlines() if l.startswith('| ') and 'tokens/s' not in l]
    assert rows == ['dot', 'ega', 'ega:none', 'authors:dot', 'authors:ega']
    # ours over theirs, for each of ours that has a counterpart
    ratios = [l.split(' against ') for l in r.stdout.splitlines() if ' against authors:' in l]
    assert [(ours, theirs.split(':')[1]) for ours, theirs in ratios] == [
        ('dot', 'dot'), ('ega', 'ega'), ('ega:none', 'ega')]
    # the command written reruns this run: lab.authors's, with bench.py's keys after its own
    assert json.loads(out.read_text())['command'] == ' '.join(
        ['python -m lab.authors', f'--script={path}', '--bench=True', *TINY, '--variants=dot,ega,ega:none', f'--out={out}'])


@pytest.mark.parametrize('text, message', [
    (None, 'No such file or directory'),
    ('def f(:\n', 'is not Python: invalid syntax (line 1)'),
    (AUTHORS_STAND_IN.replace('EGA1Attention', 'EGAAttention'), 'defines no EGA1Attention: it should be their'),
])
@pytest.mark.slow
def test_a_wrong_authors_script_is_a_one_line_error(tmp_path, text, message):
    path = tmp_path / 'theirs.py'
    if text is not None:
        path.write_text(text)
    r = beside_theirs(path, *TINY, '--variants=ega')
    assert r.returncode == 2 and r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
    assert message in r.stderr


@pytest.mark.parametrize('code', ["def f(x=open(MARKER, 'w')):\n    pass\n",
                                  "@open(MARKER, 'w').close\ndef f():\n    pass\n",
                                  "class A(nn.Module):\n    made = open(MARKER, 'w')\n",
                                  "class A(type(open(MARKER, 'w'))):\n    pass\n",
                                  "class A:\n    def g(self, y={'k': open(MARKER, 'w')}):\n        pass\n"])
def test_a_definition_that_runs_code_as_it_is_made_is_refused(tmp_path, capsys, code):
    """Only definitions of their script are executed, and a definition may itself run code (a default, a
    decorator, a class statement or base): such a script is refused in one line before anything of it runs
    (issue 69: a default argument ran, then an AttributeError traceback)."""
    from lab import authors
    marker = tmp_path / 'code-ran'
    script = tmp_path / 'theirs.py'
    script.write_text(AUTHORS_STAND_IN + '\n' + code.replace('MARKER', repr(str(marker))))
    assert authors.main([f'--script={script}']) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and err.count('\n') == 1 and 'runs code when its definition is made' in err, err
    assert not marker.exists()
