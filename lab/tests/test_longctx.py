"""lab/longctx.py: trained checkpoints evaluated on windows longer than their training window. Tiny
runs trained here (CPU, seconds); the check that a model rebuilt at a longer block_size is the
same model on the trained length refuses what cannot extrapolate, and says why."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import train  # noqa: E402
from configurator import load_config  # noqa: E402
from lab import longctx  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')   # tests/conftest.py, through lab/tests/conftest.py

TINY = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=4', '--eval_iters=2',
        '--eval_interval=20', '--log_interval=1000', '--max_iters=20', '--warmup_iters=2', '--dropout=0.0',
        '--device=cpu', '--compile=False']


@pytest.fixture(scope='module')
def runs(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp('ctx')
    for name, extra in [('alibi', ['--pos=alibi']), ('fox_nopos', ['--attn=fox', '--pos=none']),
                        ('learned', ['--pos=learned']), ('gauss', ['--attn=causal_gauss', '--pos=none']),
                        ('leaky', ['--attn=ega', '--ega_norm=window', '--pos=none'])]:
        args = TINY + extra + [f'--data_dir={data_dir}', f'--out_dir={root / "runs" / (name + "-s1")}']
        train.train(load_config(train.DEFAULTS, args, train.CHOICES))
    return root


def test_extrapolating_runs_are_evaluated_and_the_rest_refused_with_the_reason(runs, capsys):
    names = ['alibi', 'fox_nopos', 'learned', 'gauss', 'leaky']
    out = runs / 'out'
    assert longctx.main([f"--runs={','.join(str(runs / 'runs' / (n + '-s1')) for n in names)}",
                         '--lengths=8,16,32', '--windows=6', '--batch=4', '--bucket=8', f'--out_dir={out}']) == 0
    res = json.loads((out / 'context.json').read_text())
    for n in ('alibi', 'fox_nopos'):
        r = res[f'{n}-s1']
        assert r['trained'] == 16 and set(r['T']) == {'8', '16', '32'}
        # causal: a position's loss does not depend on how long the window is after it
        assert r['T']['32']['buckets'][0] == pytest.approx(r['T']['8']['loss'], abs=1e-5)
        assert r['T']['32']['buckets'][:2] == pytest.approx(r['T']['16']['buckets'], abs=1e-5)
        assert len(r['T']['32']['buckets']) == 4 and len(r['T']['32']['curve']) == 2
    assert 'do not fit a window of 32' in res['learned-s1']['refused'] and 'wpe' in res['learned-s1']['refused']
    assert 'a part reads block_size' in res['gauss-s1']['refused']       # its taps are half the window
    assert 'it leaks' in res['leaky-s1']['refused']
    md = (out / 'CONTEXT.md').read_text()
    assert '| alibi | dot, alibi | 16 | 1 |' in md and 'learned-s1: its weights do not fit' in md
    # trained on 16 positions, no baseline past the cold start (WARM = 64): its cells say so, no plot
    assert md.split('\n')[[i for i, line in enumerate(md.split('\n')) if line.startswith('| alibi')][0]].endswith('| - | - |')
    assert not (out / 'context.png').exists()
    # the table again, from context.json alone
    (out / 'CONTEXT.md').unlink()
    assert longctx.main(['--table_only=True', '--lengths=8,16,32', '--bucket=8', f'--out_dir={out}']) == 0
    assert (out / 'CONTEXT.md').read_text() == md


def test_bad_options_are_one_line_errors(cli, tmp_path):
    for args, msg in [(['--lengths=8,x'], 'comma-separated integers'), (['--windows=0'], 'must be positive'),
                      (['--bucket=8', '--lengths=16', f'--out_dir={tmp_path}', '--table_only=True'],
                       'no context results yet'), (['--windwos=3'], 'windwos')]:
        p = cli('lab.longctx', *args)
        assert p.returncode in (1, 2) and p.stderr.startswith('error: ') and msg in p.stderr, (args, p.stderr)
        assert 'Traceback' not in p.stderr


def test_a_checkpoint_that_is_not_the_runs_last_is_skipped(runs, tmp_path, capsys):
    d = runs / 'runs' / 'alibi-s1'
    (d / 'run.json').write_text(json.dumps(dict(cmd=['x'], max_iters=40)))     # the run goes on to 40
    try:
        assert longctx.main([f'--runs={d}', '--lengths=8,32', '--windows=2', '--bucket=8',
                             f'--out_dir={tmp_path}']) == 1                     # nothing to tabulate
        assert 'its checkpoint is at iter 20 of 40: the run is still training; skipped' in capsys.readouterr().out
        assert not (tmp_path / 'context.json').exists()
    finally:
        (d / 'run.json').unlink()


def test_the_baseline_leaves_the_cold_start_out_and_the_plot_draws_it(tmp_path):
    """past_and_warm: the mean on positions trained..T-1 and on WARM..trained-1 of a stored curve (one
    point per BIN positions); the table pairs their difference over seeds; context.png draws it."""
    assert longctx.WARM == 64 and longctx.BIN == 16
    curve = [9.0] * 4 + [1.0, 2.0, 3.0, 4.0] + [5.0] * 12 + [7.0] * 12     # 0..63 | 64..127 | 128..511
    r = dict(attn='dot', pos='alibi', trained=128, T={'512': dict(loss=0.0, buckets=[0.0] * 4, curve=curve)})
    assert longctx.past_and_warm(r) == (6.0, 2.5)
    assert longctx.past_and_warm(dict(r, trained=16)) is None                # no positions past the cold start
    assert longctx.past_and_warm(dict(r, T={})) is None
    res = {f'alibi-s{s}': dict(r, T={'512': dict(r['T']['512'], curve=[x + (0.1 * s if i >= 8 else 0)
                                                                   for i, x in enumerate(curve)])})
           for s in (1, 2, 3)}
    rows, _ = longctx.table(res, [512], 128)
    assert rows[2].endswith('| 2.5000 +- 0.0000 | 3 | +3.7000 | +3.4516..+3.9484 |')    # 3.5 + 0.1 s; t(2) = 4.303
    assert 'pos 64-127 | past 128 minus pos 64-127: paired seeds | mean | 95% interval |' in rows[0]
    pytest.importorskip('matplotlib')                   # the optional extra (requirements-plots.txt)
    longctx.plot(str(tmp_path), res, 512)
    assert (tmp_path / 'context.png').exists()
