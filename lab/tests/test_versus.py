"""lab/versus.py, a variant against its base (toy mode: tiny models, 8 steps): the verdict follows the ledger's
rule for given losses, a leaking form is stopped before any training, runs read on other windows do not pair, a
committed base is reused only when the code here still trains it, and a run cut short resumes; lab/show.py draws
the model's own attention weights."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import show, versus  # noqa: E402
from model import ATTN, GPT, GPTConfig, components  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.mark.parametrize('diffs, words', [({1: -0.05, 2: -0.04, 3: -0.06}, 'beats dot'),
                                          ({1: 0.05, 2: 0.04, 3: 0.06}, 'is worse than dot'),
                                          ({1: -0.05, 2: 0.04, 3: 0.01}, 'no difference from dot seen')])
def test_the_verdict_follows_the_rule_for_given_losses(diffs, words):
    got, p = versus.verdict(diffs)
    assert got == words and p['n'] == 3 and p['half'] > 0
    assert versus.verdict({1: -0.05})[0].startswith('untestable here')      # one seed: no interval, no verdict


def test_a_leaking_form_is_stopped_before_training(tmp_path, capsys):
    assert versus.main(['--attn=fourier_qk', '--toy=True', f'--out_dir={tmp_path / "o"}']) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and err.count('\n') == 1 and 'LEAKS (audit: LEAKS (max logit change' in err
    assert not (tmp_path / 'o').exists()                       # nothing made, nothing trained


def test_runs_on_other_windows_do_not_pair():
    c = dict(seeds=[1, 2, 3])
    rows = {1: {'variant': (1.50, 'set A', 1.0), 'dot': (1.60, 'set A', 1.0)},
            2: {'variant': (1.50, 'set A', 1.0), 'dot': (1.60, 'set B', 1.0)},
            3: {'variant': (None, None, None), 'dot': (1.60, 'set A', 1.0)}}
    diffs, why = versus.compared(c, rows, 'dot')
    assert list(diffs) == [1] and abs(diffs[1] + 0.10) < 1e-12
    assert why[2].startswith('other evaluation sets') and why[3] == 'the variant has not finished'


def committed_run(res, data_dir, label, seed):
    """A committed toy run in results/runs/LABEL-sSEED, trained by its recorded command."""
    d = res / 'runs' / f'{label}-s{seed}'
    cmd = ['python', 'train.py', f'config/{label}.py', 'config/cpu.py', f'--seed={seed}', *versus.TOY,
           f'--data_dir={data_dir}', f'--out_dir={d}']
    subprocess.run([sys.executable, *cmd[1:]], cwd=REPO, check=True, capture_output=True, timeout=300)
    (d / 'run.json').write_text(json.dumps(dict(cmd=cmd, max_iters=8)))
    (d / 'ckpt.pt').unlink()                                   # as committed: logs, never checkpoints
    return d


def test_a_committed_base_is_reused_only_when_its_code_is_unchanged(tmp_path, data_dir, move_results, capsys):
    res = tmp_path / 'results'
    move_results(res)
    d = committed_run(res, data_dir, 'dot', 1)
    argv = ['--attn=fox', '--toy=True', '--seeds=1', f'--data_dir={data_dir}']
    assert versus.main([*argv, f'--out_dir={tmp_path / "a"}']) == 0
    out = capsys.readouterr().out
    assert 'dot-s1: reused: its first 8 steps trained again here match its log' in out
    assert not (tmp_path / 'a' / 'runs' / 'dot-s1').exists() and (tmp_path / 'a' / 'runs' / 'fox-s1').exists()
    report = (tmp_path / 'a' / 'REPORT.md').read_text()
    assert '| 1 | ' in report and 'reused: its first 8 steps' in report and 'Reused, committed:' in report
    assert 'other evaluation sets' not in report and versus.final(tmp_path / 'a' / 'runs' / 'fox-s1')[2]
    # a committed log older than train.py's record of its set pairs by its run.json's (as results/runs' do)
    rows = [json.loads(x) for x in (d / 'log.jsonl').read_text().splitlines()]
    rec = json.loads((d / 'run.json').read_text())
    rec['eval_set'] = next(r['eval_set'] for r in rows if r['kind'] == 'eval')
    (d / 'run.json').write_text(json.dumps(rec))
    (d / 'log.jsonl').write_text(''.join(json.dumps({k: v for k, v in r.items() if k != 'eval_set'}) + '\n'
                                         for r in rows))
    assert versus.main([*argv, f'--out_dir={tmp_path / "a"}']) == 0 and '0 runs to train' in capsys.readouterr().out
    report = (tmp_path / 'a' / 'REPORT.md').read_text()
    assert 'other evaluation sets' not in report and versus.final(d)[2] == rec['eval_set']
    # the committed log no longer what this code computes (a changed model): not reused, trained here
    rows = [json.loads(x) for x in (d / 'log.jsonl').read_text().splitlines()]
    for r in rows:
        if r['kind'] == 'train' and r['iter'] == 4:
            r['loss'] += 0.01
    (d / 'log.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    assert versus.main([*argv, '--replay_steps=6', f'--out_dir={tmp_path / "b"}']) == 0
    out = capsys.readouterr().out
    assert 'dot-s1: not reused: the code here trains it otherwise: train loss @ iter 4 differs' in out
    assert (tmp_path / 'b' / 'runs' / 'dot-s1' / 'log.jsonl').exists()
    assert 'trained: the code here trains it otherwise' in (tmp_path / 'b' / 'REPORT.md').read_text()
    assert sorted(os.listdir(res / 'runs')) == ['dot-s1']     # nothing of the comparison lands in results/runs


def test_a_run_cut_short_resumes_and_a_finished_one_is_kept(tmp_path, data_dir, move_results, capsys):
    move_results(tmp_path / 'results')
    out = tmp_path / 'o'
    run = out / 'runs' / 'fox-s1'
    c = dict(attn='fox', pos='learned', base='dot', extra=[*versus.TOY, f'--data_dir={data_dir}'])
    cmd = versus.train_cmd(c, 'fox', 1, run)
    cut = [a if not a.startswith('--max_iters=') else '--max_iters=4' for a in cmd]
    subprocess.run([*cut, '--overwrite=True'], cwd=REPO, check=True, capture_output=True, timeout=300)
    argv = ['--attn=fox', '--toy=True', '--seeds=1', f'--data_dir={data_dir}', f'--out_dir={out}']
    assert versus.main(argv) == 0
    got = capsys.readouterr().out
    assert 'resume train fox-s1' in got and 'start train dot-s1' in got
    iters = [json.loads(x)['iter'] for x in (run / 'log.jsonl').read_text().splitlines()
             if json.loads(x)['kind'] == 'train']
    assert iters == sorted(set(iters)) and iters[-1] == 8                    # one log, continued to the end
    assert versus.main(argv) == 0                                          # all done: nothing trained again
    got = capsys.readouterr().out
    assert '0 runs to train' in got and 'start train' not in got


@pytest.mark.parametrize('attn', ['ega', 'dot', 'fourier_qk'])
def test_the_drawn_weights_are_the_models_own(attn):
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=16, dropout=0.0, attn=attn)).eval()
    x = torch.randint(65, (1, 16))
    A, gates = show.weights(m, x)
    assert len(A) == 2 and A[0].shape == (2, 16, 16)
    for a in A:
        assert torch.allclose(a.sum(-1), torch.ones(2, 16), atol=1e-5)           # each row a distribution
        assert a.triu(1).abs().max() == 0                                          # no later key, ever
    assert (gates[0] is not None) == (attn == 'ega')
    if attn == 'ega':
        assert gates[0].shape == (2, 16) and 0 < gates[0].min() and gates[0].max() <= 1


GATED = [n for n in ATTN if ATTN[n].slot in ('gate', 'filter_gate') or
         any(ATTN[p].slot == 'gate' for p in ATTN[n].of)]


@pytest.mark.parametrize('attn', GATED)
def test_every_gate_is_drawn_in_0_to_1(attn):
    """Every gated form's per-key gate is finite and in [0, 1], FoX's too where its key logit -c_j is past what
    exp holds (a forget gate near 0: fox_bias=-10, |c| ~ 10 T)."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, dropout=0.0, attn=attn, fox_bias=-10.0)).eval()
    _, gates = show.weights(m, torch.randint(65, (1, 16)))
    g = gates[0]
    assert g.shape == (2, 16) and torch.isfinite(g).all() and 0 <= g.min() and g.max() <= 1, attn
    if 'fox' in components(attn) and 'ega' not in components(attn):
        assert torch.all(g[:, -1] == 1) and g[:, 0].max() < 1e-30                 # the last query's decay


def test_the_picture_is_drawn_with_the_audits_verdict(tmp_path, data_dir, capsys):
    pytest.importorskip('matplotlib')
    png = tmp_path / 'a.png'
    assert show.main(['--attn=dot', f'--png={png}', f'--data_dir={data_dir}']) == 0
    assert png.stat().st_size > 1000 and 'audit causal' in capsys.readouterr().out
    assert show.main(['--attn=dot', '--out_dir=x']) == 2 and 'name one model' in capsys.readouterr().err
    assert show.main(['--attn=dot', f'--png={REPO / "README.md"}']) == 2 and 'git tracks' in capsys.readouterr().err
