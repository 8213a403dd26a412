"""The generation loss (lab/generation.py): each position's loss with the model run on exactly the tokens before
it, as sample.py generates, beside the windowed loss (and for the published EGA the prefix one), on tiny trained
checkpoints; its command's errors; and the study over the published leaking forms (lab/generation_study.py) in
toy mode: it trains, measures, writes as it goes, and goes on where it stopped."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'tests'))

import train  # noqa: E402
from lab import generation, generation_study  # noqa: E402
from test_train import TINY, one_line_error, tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def checkpoints(data_dir, tmp_path_factory):
    """Tiny checkpoints of dot, the published EGA (window statistics: leaks) and conv_paper (causal, with an edge)."""
    out = {}
    for name, extra in (('dot', ()), ('ega_paper', ('--attn=ega', '--ega_norm=window')),
                        ('conv_paper', ('--attn=conv_paper',))):
        d = tmp_path_factory.mktemp(name)
        train.train(tiny(data_dir, d, '--max_iters=6', '--dropout=0.0', *extra))
        out[name] = d
    return out


def test_a_causal_model_generates_its_windowed_loss(checkpoints):
    res = generation.evaluate(str(checkpoints['dot'] / 'ckpt.pt'))
    assert not res['leaks'] and 'prefix' not in res and res['batches'] == 2 and not res['edge']
    assert abs(res['generation'] - res['window']) < 1e-5, res
    assert all(abs(a - b) < 1e-4 for a, b in zip(res['per_position']['window'], res['per_position']['generation']))
    assert len(res['per_position']['generation']) == 32
    # the windowed loss is train.py's own val on the same windows: its last eval's
    last = [json.loads(x) for x in (checkpoints['dot'] / 'log.jsonl').read_text().splitlines()][-1]
    assert last['kind'] == 'eval' and abs(last['val'] - res['window']) < 1e-6


def test_a_leaking_model_is_scored_as_it_generates_beside_window_and_prefix(checkpoints):
    res = generation.evaluate(str(checkpoints['ega_paper'] / 'ckpt.pt'))
    assert res['leaks'] and {'window', 'prefix', 'generation'} <= set(res)
    assert abs(res['generation'] - res['window']) > 1e-4 and abs(res['generation'] - res['prefix']) > 1e-4
    # at the window's last position the model run on the whole window is the window's own computation
    assert abs(res['per_position']['generation'][-1] - res['per_position']['window'][-1]) < 1e-4
    one = generation.evaluate(str(checkpoints['ega_paper'] / 'ckpt.pt'), batches=1, windows_=2)
    assert one['batches'] == 1 and one['eval_set'].endswith('the first 2 windows of the first 1 batches')
    assert one['per_batch']['window'][0] != res['per_batch']['window'][0]      # 2 of its 4 windows


def test_a_causal_form_with_an_edge_says_why_and_generates_otherwise(checkpoints):
    res = generation.evaluate(str(checkpoints['conv_paper'] / 'ckpt.pt'))
    assert not res['leaks'] and res['edge'] and "window's end" in res['edge'][0]
    assert abs(res['generation'] - res['window']) > 1e-6


def test_the_command_names_each_loss_and_refuses_bad_input(checkpoints, data_dir, tmp_path, capsys):
    assert generation.main([f"--out_dir={checkpoints['ega_paper']}", '--batches=1']) == 0
    out = capsys.readouterr().out
    assert 'audit LEAKS' in out and out.count('\nwindow ') + out.count('\nprefix ') + out.count('\ngeneration ') == 3
    assert '[LEAKS: sees future tokens' in [x for x in out.splitlines() if x.startswith('window ')][0]
    for argv, why in (([], 'name one checkpoint'), ([f"--out_dir={checkpoints['dot']}", '--ckpt=x'], 'name one'),
                      ([f'--out_dir={tmp_path}'], 'does not exist'), ([f"--out_dir={checkpoints['dot']}",
                                                                     '--windows=-1'], 'windows and threads >= 0')):
        assert generation.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert one_line_error(err) and why in err, (argv, err)
    other = tmp_path / 'other'          # the same vocabulary, other text: another sha256
    other.mkdir()
    for name in ('train.bin', 'meta.json'):
        (other / name).write_bytes((Path(data_dir) / name).read_bytes())
    (other / 'val.bin').write_bytes((Path(data_dir) / 'val.bin').read_bytes()[2:] + b'\x00\x00')
    assert generation.main([f"--out_dir={checkpoints['dot']}", f'--data_dir={other}']) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) and 'is not the data' in err, err


def test_the_study_trains_measures_and_goes_on_where_it_stopped(data_dir, tmp_path, move_results, monkeypatch, capsys):
    move_results(tmp_path / 'results')
    run = tmp_path / 'results' / 'runs' / 'ega_paper-s1'
    run.mkdir(parents=True)
    cmd = ['python', 'train.py', 'config/ega_paper.py', *TINY, '--max_iters=4', '--eval_interval=4',
           f'--data_dir={data_dir}', '--seed=1', f'--out_dir={run}']
    (run / 'run.json').write_text(json.dumps(dict(cmd=cmd)))
    monkeypatch.setattr(generation_study, 'FORMS', (('ega_paper', (1,), 'ega', '1.3821'),))
    monkeypatch.setattr(generation_study, 'FORMS_SEEDS', {'ega_paper': (1,)})
    scratch = tmp_path / 'scratch'
    assert generation_study.main([f'--scratch={scratch}']) == 0
    out = capsys.readouterr().out
    assert 'ega_paper-s1: training (from scratch)' in out and 'generation ' in out
    res = json.loads((tmp_path / 'results' / 'generation' / 'generation.json').read_text())
    r = res['runs']['ega_paper-s1']
    assert r['leaks'] and r['committed'] is None and r['dot'] is None and r['again'] is not None
    assert r['sample'][0].startswith('ROMEO:') and 'LEAKS' in r['sample'][1]
    md = (tmp_path / 'results' / 'generation' / 'GENERATION.md').read_text()
    assert '| ega_paper-s1 |' in md and '(LEAKS)' in md
    # --table_only rewrites the report alone: the results keep the command that measured them
    before = (tmp_path / 'results' / 'generation' / 'generation.json').read_text()
    (tmp_path / 'results' / 'generation' / 'GENERATION.md').write_text('')
    assert generation_study.main(['--table_only=True']) == 0
    assert (tmp_path / 'results' / 'generation' / 'generation.json').read_text() == before
    assert (tmp_path / 'results' / 'generation' / 'GENERATION.md').read_text() == md
    # measured runs are kept; a run whose result is gone is measured again from its kept checkpoint, not retrained
    del res['runs']['ega_paper-s1']
    (tmp_path / 'results' / 'generation' / 'generation.json').write_text(json.dumps(res))
    assert generation_study.main([f'--scratch={scratch}']) == 0
    out = capsys.readouterr().out
    assert 'training' not in out and 'ega_paper-s1: window ' in out
    assert generation_study.main([f'--scratch={scratch}']) == 0 and 'ega_paper-s1: window' not in capsys.readouterr().out
    # a run cut short (its checkpoint not at the last iter) resumes
    (scratch / 'ega_paper-s1' / 'log.jsonl').write_text('')
    res['runs'] = {}
    (tmp_path / 'results' / 'generation' / 'generation.json').write_text(json.dumps(res))
    assert generation_study.main([f'--scratch={scratch}']) == 0
    assert 'ega_paper-s1: training (resumed)' in capsys.readouterr().out
