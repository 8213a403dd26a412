"""lab/bench_tables.py: the committed benches' tables (results/README.md's throughput table, the
speed notes' paper-size, CUDA and authors' tables), their goals and verdicts: moved from
tests/test_bench.py, assertions unchanged."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import bench_tables  # noqa: E402


def test_the_cuda_table_judges_each_goal_and_each_mode(tmp_path, monkeypatch):
    """results/bench/speed.md's CUDA table from `gpu_check.sh --speed`'s two runs (here made up, in a temporary
    tree): ms per step, each ratio to dot against its run's goal (90% logit-level, 85% filters), a
    compile_mode variant against its own default compile, dot against 6 ms; README's table gains a
    CUDA column; a run off CUDA, or at another size, is refused in one line naming the command."""
    from configurator import ConfigError
    from lab import paths
    monkeypatch.setattr(paths, 'REPO', str(tmp_path))
    assert bench_tables.cuda_runs() == {} and 'No CUDA run is committed yet' in bench_tables.cuda_table({})
    B, T = 64, 256
    size = dict(device='cuda', compile=True, n_layer=6, n_head=8, n_embd=256, block_size=T, batch_size=B,
                dropout=0.1)

    def fake(tps, **cfg):
        return dict(command='python bench.py ...', date='2026-12-05', time='10:00', code='abc1234', torch='2.11.0',
                    versions='python 3.12.3, torch 2.11.0+cu130, CUDA 13.0, NVIDIA H200', config={**size, **cfg},
                    variants={k: dict(tps=v, mem=2 ** 30, mfu=0.05, eager=False, kernel='flash') for k, v in tps.items()})
    dot = B * T / 5.5e-3                                        # 5.5 ms a step
    (tmp_path / 'results' / 'bench').mkdir(parents=True)
    (tmp_path / bench_tables.CUDA_RUNS['logit']).write_text(json.dumps(fake(
        {'dot': dot, 'ega': 0.901 * dot, 'fox': 0.899 * dot, 'dot:learned:compile_mode=reduce-overhead': 1.3 * dot,
         'ega:mope:compile_mode=reduce-overhead': dot})))
    runs = bench_tables.cuda_runs()
    table = bench_tables.cuda_table(runs)
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in table.splitlines() if r.startswith('| ') and '---' not in r}
    assert rows['dot'][1:5] == ['5.5', f'{dot:,.0f}', '100.0%', '-'] and rows['dot'][-1] == 'flash |'
    assert rows['ega'][3:5] == ['90.1%', 'met'] and rows['fox'][3:5] == ['89.9%', '**not met**']
    assert rows['dot:learned:compile_mode=reduce-overhead'][3:5] == ['130.0%', '1.30x its default compile']
    assert rows['ega:mope:compile_mode=reduce-overhead'][4] == '-'        # no ega:mope in the run
    assert "dot 5.5 ms a step against the goal of 6 ms: met" in table and 'NVIDIA H200; dropout 0.1)' in table
    assert 'Not committed: results/bench/cuda_filters.json' in table
    eager = dict(command='python bench.py', date='2026-12-01', torch='2.13.0+cpu', threads=2,
                 variants={k: dict(tps=100.0, mem=1, params=1) for k in ('dot', 'ega', 'causal_gauss')})
    readme = bench_tables.readme_table(eager, eager, cuda=runs)
    head, *lines = [r for r in readme.splitlines() if r.startswith('| ')]
    assert 'CUDA, paper size: vs dot' in head and all(r.count('|') == head.count('|') for r in lines)
    assert [r.split(' | ')[-2] for r in lines] == ['100.0%', '90.1%', '-']
    assert 'CUDA' not in bench_tables.readme_table(eager, eager)
    (tmp_path / bench_tables.CUDA_RUNS['filters']).write_text(json.dumps(fake({'dot': dot}, batch_size=16)))
    with pytest.raises(ConfigError, match="cuda_filters.json is not a compiled CUDA run with dot at the paper's size and"):
        bench_tables.cuda_runs()
    (tmp_path / bench_tables.CUDA_RUNS['filters']).write_text(json.dumps(fake({'dot': dot, 'causal_gauss': 0.86 * dot})))
    assert '| causal_gauss | ' in bench_tables.cuda_table(bench_tables.cuda_runs())
    cut = 'not benched, by deadline_s=175: causal_morlet (a first step took up to 41 s)'
    (tmp_path / bench_tables.CUDA_RUNS['filters']).write_text(json.dumps(fake(
        {'dot': dot, 'causal_gauss': 0.86 * dot}, cut=cut, steps_run=20, warmup_run=5)))
    assert f'Its deadline cut it ({cut}): the median of 20 timed steps after 5 warm-up.' in \
        bench_tables.cuda_table(bench_tables.cuda_runs())
    assert bench_tables.default_compile('dot:mope:compile_mode=reduce-overhead') == 'dot:mope'
    assert bench_tables.default_compile('ega:learned:ega_norm=window:compile_mode=reduce-overhead') == \
        'ega:learned:ega_norm=window'
    assert bench_tables.default_compile('ega:learned:ega_norm=window') is None


def test_readme_table_sets_each_ratio_beside_its_goal():
    sys.path.insert(0, str(REPO))

    def fake(cmd, tps):
        return dict(command=cmd, date='2026-12-01', torch='2.13.0+cpu', threads=2,
                    variants={k: dict(tps=v, mem=2 ** 20, params=10) for k, v in tps.items()})
    eager = fake('python bench.py', {'dot': 1000.0, 'ega': 949.6, 'fox': 949.4, 'ega_fox': 921.0})
    compiled = fake('python bench.py --compile=True', {'dot': 500.0, 'ega': 1899.2})
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in bench_tables.readme_table(eager, compiled).splitlines()
            if r.startswith('| ') and not r.startswith('| variant')}
    assert rows['dot'][2:5] == ['100.0%', '-', '-']                            # no goal of its own
    assert rows['ega'][2:5] == ['95.0%', '-', '95%: met']                 # as the ratio shows it
    assert rows['fox'][2:5] == ['94.9%', '-', '95%: **not met**']
    assert rows['ega_fox'][2:5] == ['92.1%', '-', '92%: met']
    assert rows['dot'][6:8] == ['500', '0.50x'] and rows['ega'][6:8] == ['1,899', '2.00x']
    assert rows['fox'][6:8] == ['-', '-']                                      # not in the compiled run
    # repeated runs: their ratios beside, and each goal judged on the median over all the runs
    again = [fake('python bench.py', {'dot': 2000.0, 'ega': 1800.0, 'fox': 1960.0}),
             fake('python bench.py', {'dot': 1000.0, 'ega': 940.0, 'fox': 960.0, 'ega_fox': 910.0})]
    table = bench_tables.readme_table(eager, compiled, again)
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in table.splitlines()
            if r.startswith('| ') and not r.startswith('| variant')}
    assert rows['ega'][2:5] == ['95.0%', '90.0%, 94.0%', '95%: **not met**']     # median 94.0%
    assert rows['fox'][2:5] == ['94.9%', '98.0%, 96.0%', '95%: met']             # median 96.0%
    assert rows['ega_fox'][2:5] == ['92.1%', '91.0%', '92%: **not met**']       # median of 2: 91.55%
    assert 'each goal judged on the median over the 3 runs' in table
    assert 'first loss against its eager one' not in bench_tables.readme_table(eager, compiled)
    compiled['variants']['dot']['compile_diff'], compiled['variants']['ega']['compile_diff'] = 2e-7, 5e-7
    assert ("Each compiled model's first loss against its eager one: largest difference 5e-07 (ega), "
            "of 2 variants.") in bench_tables.readme_table(eager, compiled)


def test_readme_without_the_right_runs_is_a_one_line_error(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO))
    import json
    from lab import bench
    monkeypatch.setattr(bench_tables, 'EAGER', str(tmp_path / 'none.json'))
    with pytest.raises(bench.ConfigError, match='none.json is missing: python -m lab.bench --steps=60'):
        bench_tables.write_readme()
    (tmp_path / 'bad.json').write_text('{"variants": ')
    monkeypatch.setattr(bench_tables, 'EAGER', str(tmp_path / 'bad.json'))
    with pytest.raises(bench.ConfigError, match='bad.json is not JSON'):
        bench_tables.write_readme()
    compiled = json.loads((REPO / bench_tables.COMPILED).read_text())
    (tmp_path / 'swapped.json').write_text(json.dumps(compiled))   # a compiled run as the eager one
    monkeypatch.setattr(bench_tables, 'EAGER', str(tmp_path / 'swapped.json'))
    with pytest.raises(bench.ConfigError, match='swapped.json is not an eager run with dot'):
        bench_tables.write_readme()
    small = dict(compiled, config=dict(compiled['config'], compile=False, block_size=64))
    (tmp_path / 'small.json').write_text(json.dumps(small))
    monkeypatch.setattr(bench_tables, 'EAGER', str(tmp_path / 'small.json'))
    with pytest.raises(bench.ConfigError, match='were run at different scales'):
        bench_tables.write_readme()


def test_readme_names_every_variant_a_committed_run_lacks(tmp_path, monkeypatch):
    """A run of some variants (`--variants=dot,ega --out=results/bench/cpu.json`): the table has the rows the eager
    run holds, and a line under it names every variant the other committed runs hold that it lacks, and the command
    that benches them; a variant registered since (the README's recipe adds one) changes no table of the lab's."""
    sys.path.insert(0, str(REPO))
    import json
    from lab import bench
    wrote = []
    monkeypatch.setattr(bench_tables, 'write_block', lambda *a, **k: wrote.append(a))
    committed = {key: json.loads((REPO / getattr(bench_tables, key)).read_text()) for key in ('EAGER', 'COMPILED')}
    for key, which in (('EAGER', 'the eager'), ('COMPILED', 'the compiled')):
        run = dict(committed[key], variants={k: v for k, v in committed[key]['variants'].items() if k in ('dot', 'ega')})
        (tmp_path / f'{key}.json').write_text(json.dumps(run))
        others = {k: json.loads((REPO / getattr(bench_tables, k)).read_text()) for k in ('EAGER', 'COMPILED') if k != key}
        held = list(dict.fromkeys([*run['variants'], *(v for r in others.values() for v in r['variants'])]))
        lacking = [v for v in held if v not in run['variants']]
        with monkeypatch.context() as m:
            m.setattr(bench_tables, key, str(tmp_path / f'{key}.json'))
            wrote.clear()
            bench_tables.write_readme()
            table = wrote[0][2]
            assert f"**Not in {which} run**: {', '.join(lacking)} (left out): `python -m lab.bench" \
                in table and f"--out={tmp_path / key}.json --overwrite=True` adds them." in table
            rows = 2 if key == 'EAGER' else len(committed['EAGER']['variants'])
            assert table.count('\n| ') == 1 + rows
    wrote.clear()
    bench_tables.write_readme()                # the committed runs: a line only for what they lack (none, here)
    lacking = [v for v in committed['COMPILED']['variants'] if v not in committed['EAGER']['variants']]
    assert ('**Not in the eager run**' in wrote[0][2]) == bool(lacking)
    before = wrote[0][2]
    import model
    monkeypatch.setitem(model.ATTN, 'softcap', model.ATTN['dot'])            # a variant registered since
    assert 'softcap' in bench.all_variants()
    wrote.clear()
    bench_tables.write_readme()
    assert wrote[0][2] == before
    assert wrote[0][2].count('\n| ') == 1 + len(committed['EAGER']['variants'])


def test_readme_throughput_table_is_the_committed_runs():
    sys.path.insert(0, str(REPO))
    text = (REPO / 'results' / 'README.md').read_text()
    a, b = text.index(bench_tables.THROUGHPUT[0]) + len(bench_tables.THROUGHPUT[0]), text.index(bench_tables.THROUGHPUT[1])
    assert text[a:b].strip() == bench_tables.readme_table(*bench_tables.readme_runs()), \
        "results/README.md's throughput table is not what the committed runs give: python -m lab.bench_tables --write=True"


def test_readme_table_says_whether_every_variant_compiled():
    sys.path.insert(0, str(REPO))

    def fake(cmd, tps, **counts):
        return dict(command=cmd, date='2026-12-01', torch='2.13.0+cpu', threads=2,
                    variants={k: dict(tps=v, mem=2 ** 20, params=10, **counts.get(k, {})) for k, v in tps.items()})
    eager = fake('python bench.py', {'dot': 1000.0, 'ega': 950.0})
    ok = dict(graphs=1, graph_breaks=0, limit_hits=0)
    compiled = fake('python bench.py --compile=True', {'dot': 1200.0, 'ega': 1140.0},
                    dot=ok, ega=dict(graphs=3, graph_breaks=2, limit_hits=0))
    table = bench_tables.readme_table(eager, compiled)
    assert 'Every one of the 2 variants compiled (4 graphs, 2 graph breaks, no recompile-limit hit).' in table
    assert '| compiled (every variant), tokens/s |' in table and '(eager)' not in table
    compiled['variants']['ega'].update(limit_hits=1)
    table = bench_tables.readme_table(eager, compiled)
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in table.splitlines() if r.startswith('| ega')}
    assert '**Not every variant compiled**: ega ran eager' in table
    assert rows['ega'][6:8] == ['1,140 (eager)', '1.20x']
    assert '| compiled (1 ran eager), tokens/s |' in table
    # a run without the counts (the committed one, made before they were kept): not verified
    compiled = json.loads((REPO / bench_tables.COMPILED).read_text())
    for v in compiled['variants'].values():
        for key in ('graphs', 'graph_breaks', 'limit_hits', 'eager'):
            v.pop(key, None)
    table = bench_tables.readme_table(json.loads((REPO / bench_tables.EAGER).read_text()), compiled)
    assert '**The compiled column is not verified per variant**' in table
    assert '| compiled (not verified), tokens/s |' in table


def test_the_paper_size_compiled_table_is_the_committed_runs():
    """results/bench/speed.md's table of the compiled logit-level forms at the paper's size is what the committed
    runs give, and each is a compiled run at that size."""
    sys.path.insert(0, str(REPO))
    runs, plain = bench_tables.paper_runs()
    assert len(runs) == 3
    for r in runs + [plain]:
        cfg = r['config']
        assert (cfg['compile'], cfg['n_layer'], cfg['n_head'], cfg['n_embd'], cfg['block_size'], cfg['batch_size']) \
            == (True, 6, 8, 256, 256, 16), r['command']
    assert plain['variants']['dot:learned:attn_impl=plain']
    text = (REPO / 'results' / 'bench' / 'speed.md').read_text()
    a, b = text.index(bench_tables.PAPER_BLOCK[0]) + len(bench_tables.PAPER_BLOCK[0]), text.index(bench_tables.PAPER_BLOCK[1])
    assert text[a:b].strip() == bench_tables.paper_table(runs, plain), \
        "results/bench/speed.md's paper-size table is not what the committed runs give: python -m lab.bench_tables --write=True"


def test_the_authors_comparison_is_the_committed_runs():
    """results/bench/speed.md's comparison with the authors' EGA is what the committed runs give (three at each scale)."""
    sys.path.insert(0, str(REPO))
    text = (REPO / 'results' / 'bench' / 'speed.md').read_text()
    a, b = text.index(bench_tables.AUTHORS_BLOCK[0]) + len(bench_tables.AUTHORS_BLOCK[0]), text.index(bench_tables.AUTHORS_BLOCK[1])
    table = bench_tables.authors_table()
    assert text[a:b].strip() == table, "results/bench/speed.md's authors table is stale: python -m lab.bench_tables --write=True"
    assert [row.count('.json') for row in table.splitlines()[2:]] == [3, 3]


def test_the_paper_and_authors_tables_compute_their_ratios_medians_and_verdicts(tmp_path, monkeypatch):
    """paper_table and authors_table on made-up runs with known tokens/s: each ratio to dot, the median
    of the runs, the goal met or not as the median says, the bound; a run at another size is refused."""
    sys.path.insert(0, str(REPO))
    import json
    from configurator import ConfigError
    cfg = dict(compile=True, n_layer=6, n_head=8, n_embd=256, block_size=256, batch_size=16, precision='float32')

    def run(**tps):
        return dict(command='python bench.py', date='2026-12-02', time='12:00', code='abc1234', torch='t', threads=2,
                    config=cfg, variants={k: dict(tps=v, mem=2 ** 20) for k, v in tps.items()})
    runs = [run(dot=100, ega=96, fox=90), run(dot=100, ega=94, fox=99), run(dot=200, ega=190, fox=180)]
    table = bench_tables.paper_table(runs, run(dot=100, **{'dot:learned:attn_impl=plain': 87}))
    rows = {line.split(' | ')[0][2:]: line.split(' | ') for line in table.splitlines() if line.startswith('| ')}
    assert rows['ega'][2:5] == ['96.0%, 94.0%, 95.0%', '95.0%', 'met']          # median 95.0 >= 95
    assert rows['fox'][2:5] == ['90.0%, 99.0%, 90.0%', '90.0%', '**not met**']
    assert rows['dot:learned:attn_impl=plain'][2] == '87.0%'
    (tmp_path / 'a').mkdir()
    for i, r in enumerate([run(dot=150, ega=140, **{'authors:dot': 100, 'authors:ega': 100}),
                           run(dot=150, ega=130, **{'authors:dot': 120, 'authors:ega': 100}),
                           run(dot=160, ega=150, **{'authors:dot': 100, 'authors:ega': 100})]):
        (tmp_path / ('a.json' if i == 0 else f'a_repeats/{i}.json')).parent.mkdir(exist_ok=True)
        (tmp_path / ('a.json' if i == 0 else f'a_repeats/{i}.json')).write_text(json.dumps(r))
    monkeypatch.setattr(bench_tables.paths, 'REPO', str(tmp_path))
    monkeypatch.setattr(bench_tables, 'AUTHORS_RUNS', {'here': 'a'})
    monkeypatch.setattr(bench_tables, 'AUTHORS_GOALS', {'here': 1.4})
    cells = bench_tables.authors_table().splitlines()[2].rstrip(' |').split(' | ')
    assert cells[2:7] == ['1.40x, 1.30x, 1.50x', '1.40x', '1.4x: met', '1.50x', '1.50x']
    monkeypatch.setattr(bench_tables, 'AUTHORS_GOALS', {'here': 1.45})
    assert '1.45x: **not met**' in bench_tables.authors_table()
    bad = run(dot=150, ega=140, **{'authors:dot': 100, 'authors:ega': 100})
    bad['config'] = dict(cfg, n_layer=4)
    (tmp_path / 'a_repeats' / '2.json').write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match='of different sizes'):
        bench_tables.authors_table()
